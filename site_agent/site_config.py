"""The site's own configuration, written by site IT into the startup kit: `<kit>/local/site_agent.json`.

Jobs never carry paths to patient data: a job names a dataset key (e.g. "linear", "brats") and the site maps
it to a local folder here. A path may contain `{site_name}` (used by the simulator, where all simulated sites
share one config file).

    {"datasets": {"linear": "/data/fl/linear"}, "device": "auto"}
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

CONFIG_FILE = "site_agent.json"
DEVICES = ("auto", "cpu", "cuda")


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
        if not path.is_file():
            raise SiteConfigError(
                f"{path}: site configuration not found; create it with e.g. "
                '{"datasets": {"linear": "/path/to/data"}} (see docs/site-it-guide.md)'
            )
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise SiteConfigError(f"{path}: not valid JSON ({exc}); fix the file") from exc
        if not isinstance(raw, dict):
            raise SiteConfigError(f"{path}: expected a JSON object with a 'datasets' field")
        unknown = sorted(set(raw) - {"datasets", "device"})
        if unknown:
            raise SiteConfigError(f"{path}: unknown fields {unknown}; allowed: datasets, device")
        datasets = raw.get("datasets", {})
        if not isinstance(datasets, dict) or not all(isinstance(v, str) for v in datasets.values()):
            raise SiteConfigError(f'{path}: "datasets" must map dataset names to folder paths')
        device = raw.get("device", "auto")
        if device not in DEVICES:
            raise SiteConfigError(f'{path}: "device" is {device!r}; use one of {list(DEVICES)}')
        return cls(path=path, datasets=datasets, device=device)

    @classmethod
    def for_kit(cls, kit_dir: Path) -> SiteConfig:
        return cls.load(Path(kit_dir) / "local" / CONFIG_FILE)

    def data_dir(self, dataset: str, site_name: str) -> Path:
        """The local folder of `dataset`, which must exist."""
        if dataset not in self.datasets:
            raise SiteConfigError(
                f'{self.path}: no dataset "{dataset}" configured; add "datasets": {{"{dataset}": "/path/to/folder"}}'
            )
        folder = Path(self.datasets[dataset].replace("{site_name}", site_name)).expanduser()
        if not folder.is_dir():
            raise SiteConfigError(f'{self.path}: dataset "{dataset}" points to {folder}, which is not a folder')
        return folder


def write_site_config(kit_dir: Path, datasets: dict[str, str], device: str = "auto") -> Path:
    """Write `<kit>/local/site_agent.json` (what `site-agent configure` does for site IT)."""
    if device not in DEVICES:
        raise SiteConfigError(f"device {device!r} is not one of {list(DEVICES)}")
    path = Path(kit_dir) / "local" / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"datasets": datasets, "device": device}, indent=2) + "\n")
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
    print(f"wrote {write_site_config(Path(args.kit), datasets, device)}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("configure", help="point the agent at this site's data folders")
    parser.add_argument("--kit", required=True, help="folder of this site's startup kit")
    parser.add_argument("--data", action="append", default=[], metavar="KEY=FOLDER", help="dataset key and local folder (repeatable)")
    parser.add_argument("--device", choices=DEVICES, help="auto (GPU when present), cpu or cuda")
    parser.set_defaults(func=_configure)
