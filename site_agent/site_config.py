"""The site's own configuration, written by site IT into the startup kit: `<kit>/local/site_agent.json`.

Jobs never carry paths to patient data: a job names a dataset key (e.g. "linear", "brats") and the site maps
it to a local folder here (format and checks: `fl_contract.local_config`).

    {"datasets": {"linear": "/data/fl/linear"}, "device": "auto"}
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from fl_contract.local_config import DEVICES, read_folder_map, resolve_folder, write_folder_map

CONFIG_FILE = "site_agent.json"
EXAMPLE = '{"datasets": {"linear": "/path/to/data"}, "device": "auto"}'


class SiteConfigError(ValueError):
    """The site configuration is missing or wrong; the message names the file and the field to fix."""


@dataclass(frozen=True)
class SiteConfig:
    path: Path
    datasets: dict[str, str] = field(default_factory=dict)
    device: str = "auto"

    @classmethod
    def load(cls, path: Path) -> SiteConfig:
        path = Path(path)
        datasets, device = read_folder_map(path, "datasets", EXAMPLE, "docs/site-it-guide.md", SiteConfigError)
        return cls(path=path, datasets=datasets, device=device)

    @classmethod
    def for_kit(cls, kit_dir: Path) -> SiteConfig:
        return cls.load(Path(kit_dir) / "local" / CONFIG_FILE)

    def data_dir(self, dataset: str, site_name: str) -> Path:
        """The local folder of `dataset`, which must exist."""
        return resolve_folder(self.path, self.datasets, "dataset", dataset, SiteConfigError, site_name)


def write_site_config(kit_dir: Path, datasets: dict[str, str], device: str = "auto") -> Path:
    """Write `<kit>/local/site_agent.json` (what `site-agent configure` does for site IT)."""
    return write_folder_map(Path(kit_dir) / "local" / CONFIG_FILE, "datasets", datasets, device, SiteConfigError)


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
    print(f"wrote {write_site_config(Path(args.kit), datasets, device)}")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("configure", help="point the agent at this site's data folders")
    parser.add_argument("--kit", required=True, help="folder of this site's startup kit")
    parser.add_argument("--data", action="append", default=[], metavar="KEY=FOLDER",
                        help="dataset key and local folder (repeatable)")
    parser.add_argument("--device", choices=DEVICES, help="auto (GPU when present), cpu or cuda")
    parser.set_defaults(func=_configure)
