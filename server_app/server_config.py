"""The server's own configuration, written by the federation lead into the server kit: `<kit>/local/server_app.json`.

Like a site's `site_agent.json`, it keeps local paths out of jobs: a job names a model key (e.g. "dcae") and the
server maps it to a local folder here. In FLARE's simulator the server and the sites share `<workspace>/local/`.

    {"models": {"dcae": "/opt/models/dc-ae-f32c32-in-1.0"}, "device": "auto"}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fl_contract.local_config import read_folder_map, resolve_folder, write_folder_map

CONFIG_FILE = "server_app.json"
EXAMPLE = '{"models": {"dcae": "/path/to/autoencoder"}, "device": "auto"}'


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
        models, device = read_folder_map(path, "models", EXAMPLE, "docs/fedkt-csd.md", ServerConfigError)
        return cls(path, models, device)

    def model_dir(self, key: str) -> Path:
        """The local folder of model `key`, which must exist."""
        return resolve_folder(self.path, self.models, "model", key, ServerConfigError)


def write_server_config(kit_dir: Path, models: dict[str, str], device: str = "auto") -> Path:
    """Write `<kit>/local/server_app.json` (for the lead's setup scripts, the demo and tests)."""
    return write_folder_map(Path(kit_dir) / "local" / CONFIG_FILE, "models", models, device, ServerConfigError)
