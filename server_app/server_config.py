"""The server's own configuration, written by the federation lead into the server kit: `<kit>/local/server_app.json`.

Like a site's `site_agent.json`, it keeps local paths out of jobs: a job names a model key (e.g. "dcae") and the
server maps it to a local folder here. In FLARE's simulator the server and the sites share `<workspace>/local/`.

    {"models": {"dcae": "/opt/models/dc-ae-f32c32-in-1.0"}, "device": "auto"}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

CONFIG_FILE = "server_app.json"
DEVICES = ("auto", "cpu", "cuda")


class ServerConfigError(ValueError):
    """The server configuration is missing or wrong; the message names the file and the field to fix."""


@dataclass(frozen=True)
class ServerConfig:
    path: Path
    models: dict[str, str] = field(default_factory=dict)
    device: str = "auto"

    @classmethod
    def load(cls, path: Path) -> ServerConfig:
        path = Path(path)
        example = '{"models": {"dcae": "/path/to/autoencoder"}, "device": "auto"}'
        if not path.is_file():
            raise ServerConfigError(f"{path}: server configuration not found; create it with e.g. {example} "
                                    "(see docs/fedkt-csd.md)")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ServerConfigError(f"{path}: not valid JSON ({exc}); fix the file") from exc
        models = raw.get("models", {}) if isinstance(raw, dict) else None
        if not isinstance(models, dict) or not all(isinstance(v, str) for v in models.values()):
            raise ServerConfigError(f'{path}: expected {example}: "models" must map model keys to folder paths')
        unknown = sorted(set(raw) - {"models", "device"})
        if unknown or raw.get("device", "auto") not in DEVICES:
            raise ServerConfigError(f'{path}: allowed fields are "models" and "device" (one of {list(DEVICES)}); '
                                    f"got unknown fields {unknown}, device {raw.get('device')!r}")
        return cls(path, models, raw.get("device", "auto"))

    def model_dir(self, key: str) -> Path:
        """The local folder of model `key`, which must exist."""
        if key not in self.models:
            raise ServerConfigError(f'{self.path}: no model "{key}" configured; add "models": {{"{key}": "/path/to/folder"}}')
        folder = Path(self.models[key]).expanduser()
        if not folder.is_dir():
            raise ServerConfigError(f'{self.path}: model "{key}" points to {folder}, which is not a folder')
        return folder


def write_server_config(kit_dir: Path, models: dict[str, str], device: str = "auto") -> Path:
    """Write `<kit>/local/server_app.json` (for the lead's setup scripts, the demo and tests)."""
    path = Path(kit_dir) / "local" / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"models": models, "device": device}, indent=2) + "\n")
    return path
