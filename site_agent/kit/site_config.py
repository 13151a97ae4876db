"""The site's own configuration, written by site IT into the startup kit: `<kit>/local/site_agent.json`.

Jobs never carry paths to patient data: a job names a dataset key (e.g. "linear", "brats") and the site maps
it to a local folder here (format and checks: `fl_contract.local_config`). How this machine computes is the site's
choice too, never the job's: a job cannot know a hospital's GPU, cores or memory.

    {"datasets": {"linear": "/data/fl/linear"}, "device": "auto",
     "loader_workers": 0, "data_cache": "memory", "encode_batch_size": null}
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from fl_contract.local_config import DEVICES, read_local_config, resolve_folder, write_folder_map

CONFIG_FILE = "site_agent.json"
EXAMPLE = '{"datasets": {"linear": "/path/to/data"}, "device": "auto"}'


DataCache = Literal["memory", "disk"]
DATA_CACHES = ("memory", "disk")


class SiteConfigError(ValueError):
    """The site configuration is missing or wrong; the message names the file and the field to fix."""


@dataclass(frozen=True)
class ComputeSettings:
    """How this site feeds its device; the defaults are the agent's CPU behaviour.

    `loader_workers`: worker processes that read and augment training batches (0: in the training process);
    on a GPU the loader also prepares the next batch in a thread while the GPU trains on this one.
    `data_cache`: where decoded, normalised volumes are kept after their first read: "memory" (RAM, the job's
    `cache_rate` of the cases) or "disk" (the site's workspace, every case, kept across rounds and jobs; for
    sites whose cases do not fit in RAM). Either way no epoch after the first reads DICOM or NIfTI again.
    `encode_batch_size`: FedKT-CSD's encoding batch; None: the device's default (site_agent.fedkt_csd.stats).
    """

    loader_workers: int = 0
    data_cache: DataCache = "memory"
    encode_batch_size: int | None = None

    @classmethod
    def parse(cls, raw: dict[str, Any], path: Path) -> ComputeSettings:
        """The settings present in `raw` (defaults for the rest), each checked, naming the file and the fix."""
        settings = cls(**raw)
        workers, batch = settings.loader_workers, settings.encode_batch_size
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
            raise SiteConfigError(f'{path}: "loader_workers" is {workers!r}; use 0 (no worker processes) or more')
        if settings.data_cache not in DATA_CACHES:
            raise SiteConfigError(f'{path}: "data_cache" is {settings.data_cache!r}; use one of {list(DATA_CACHES)}')
        if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
            raise SiteConfigError(f'{path}: "encode_batch_size" is {batch!r}; use a positive integer or null')
        return settings


COMPUTE_FIELDS = tuple(f.name for f in fields(ComputeSettings))
PROXY_FIELD = "proxy"


def parse_proxy(value: Any, path: Path) -> str | None:
    """The hospital's HTTP proxy as `http://host:port` (FLARE's grpc transport and `site-agent check` open the
    server's connection through it with CONNECT), or None: the site reaches the server directly."""
    if value is None:
        return None
    parsed = urlsplit(value) if isinstance(value, str) else None
    if parsed is None or parsed.scheme != "http" or not parsed.hostname or parsed.port is None or parsed.path not in (
            "", "/"):
        raise SiteConfigError(f'{path}: "proxy" is {value!r}; give the proxy as http://HOST:PORT (the address of the '
                              "hospital's HTTP proxy, which tunnels the server's TLS with CONNECT), or null")
    return f"http://{parsed.hostname}:{parsed.port}"


def configured_proxy(kit_dir: Path) -> str | None:
    """The proxy in the kit's site configuration; None without one (or before `site-agent configure`)."""
    path = Path(kit_dir) / "local" / CONFIG_FILE
    return SiteConfig.load(path).proxy if path.is_file() else None


@dataclass(frozen=True)
class SiteConfig:
    path: Path
    datasets: dict[str, str] = field(default_factory=dict)
    device: str = "auto"
    compute: ComputeSettings = ComputeSettings()
    proxy: str | None = None  # http://host:port, or None: the server is reached directly

    @classmethod
    def load(cls, path: Path) -> SiteConfig:
        path = Path(path)
        datasets, device, settings = read_local_config(path, "datasets", EXAMPLE, "docs/site-it-guide.md",
                                                       SiteConfigError, (*COMPUTE_FIELDS, PROXY_FIELD))
        proxy = parse_proxy(settings.pop(PROXY_FIELD, None), path)
        return cls(path=path, datasets=datasets, device=device, compute=ComputeSettings.parse(settings, path),
                   proxy=proxy)

    @classmethod
    def for_kit(cls, kit_dir: Path) -> SiteConfig:
        return cls.load(Path(kit_dir) / "local" / CONFIG_FILE)

    def data_dir(self, dataset: str, site_name: str) -> Path:
        """The local folder of `dataset`, which must exist."""
        return resolve_folder(self.path, self.datasets, "dataset", dataset, SiteConfigError, site_name)


def write_site_config(kit_dir: Path, datasets: dict[str, str], device: str = "auto",
                      compute: ComputeSettings = ComputeSettings(), proxy: str | None = None) -> Path:
    """Write `<kit>/local/site_agent.json` (what `site-agent configure` does for site IT), readable by its owner only
    (it names the site's data folders)."""
    settings = {**asdict(compute), **({PROXY_FIELD: proxy} if proxy else {})}
    path = write_folder_map(Path(kit_dir) / "local" / CONFIG_FILE, "datasets", datasets, device, SiteConfigError,
                            settings)
    os.chmod(path, 0o600)
    return path


def _configure(args: argparse.Namespace) -> int:
    path = Path(args.kit) / "local" / CONFIG_FILE
    current = SiteConfig.load(path) if path.is_file() else None
    datasets = dict(current.datasets) if current else {}
    for item in args.data:
        key, sep, folder = item.partition("=")
        if not sep or not key or not folder:
            raise SiteConfigError(f"--data {item!r}: expected KEY=FOLDER, e.g. --data brats=/data/brats")
        datasets[key] = str(Path(folder).expanduser().resolve())
    device = args.device or (current.device if current else "auto")
    compute = current.compute if current else ComputeSettings()
    changes = {name: getattr(args, name) for name in COMPUTE_FIELDS if getattr(args, name) is not None}
    compute = ComputeSettings.parse({**asdict(compute), **changes}, path)
    proxy = current.proxy if current else None
    if args.proxy is not None:
        proxy = None if args.proxy.lower() == "none" else parse_proxy(args.proxy, path)
    print(f"wrote {write_site_config(Path(args.kit), datasets, device, compute, proxy)}")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("configure", help="point the agent at this site's data folders")
    parser.add_argument("--kit", required=True, help="folder of this site's startup kit")
    parser.add_argument("--data", action="append", default=[], metavar="KEY=FOLDER",
                        help="dataset key and local folder (repeatable)")
    parser.add_argument("--device", choices=DEVICES, help="auto (GPU when present), cpu or cuda")
    parser.add_argument("--loader-workers", dest="loader_workers", type=int,
                        help="worker processes preparing training batches (default 0; on a GPU server e.g. 4-8)")
    parser.add_argument("--data-cache", dest="data_cache", choices=DATA_CACHES,
                        help="keep decoded cases in memory (default) or on disk in the site's workspace")
    parser.add_argument("--encode-batch-size", dest="encode_batch_size", type=int,
                        help="FedKT-CSD encoding batch (default: 32 on the CPU, 256 on a GPU)")
    parser.add_argument("--proxy", metavar="http://HOST:PORT",
                        help="the hospital's HTTP proxy, when the site reaches the server only through it (FLARE's "
                             "grpc connection and site-agent check tunnel through it with CONNECT); none removes it")
    parser.set_defaults(func=_configure)
