"""Local JSON files that map keys to folders (a site's datasets, the server's models) plus a device choice
(and, for sites, how they compute: site_agent.kit.site_config).

Jobs name keys only; these files, written by the people who run the machine, are the only place with local paths.
A path may contain `{site_name}` (FLARE's simulator gives all simulated sites one shared file).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

DEVICES = ("auto", "cpu", "cuda")


def read_folder_map(
    path: Path, field: str, example: str, guide: str, error: type[ValueError]
) -> tuple[dict[str, str], str]:
    """(mapping of `field`, device) from `path`; every problem raises `error` naming the file and the fix."""
    mapping, device, _ = read_local_config(path, field, example, guide, error)
    return mapping, device


def read_local_config(
    path: Path, field: str, example: str, guide: str, error: type[ValueError], settings: Collection[str] = ()
) -> tuple[dict[str, str], str, dict[str, Any]]:
    """(mapping of `field`, device, the `settings` fields present) from `path`; the caller checks the settings'
    values. Any other field raises `error`: a typo must not silently leave a setting at its default."""
    if not path.is_file():
        raise error(f"{path}: configuration not found; create it with e.g. {example} (see {guide})")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON ({exc}); fix the file") from exc
    if not isinstance(raw, dict):
        raise error(f"{path}: expected a JSON object like {example}")
    allowed = [field, "device", *settings]
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise error(f"{path}: unknown fields {unknown}; allowed: {', '.join(allowed)}")
    mapping = raw.get(field, {})
    if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
        raise error(f'{path}: "{field}" must map names to folder paths, e.g. {example}')
    device = raw.get("device", "auto")
    if device not in DEVICES:
        raise error(f'{path}: "device" is {device!r}; use one of {list(DEVICES)}')
    return mapping, device, {key: raw[key] for key in settings if key in raw}


def resolve_folder(
    path: Path, mapping: dict[str, str], kind: str, key: str, error: type[ValueError], site_name: str = ""
) -> Path:
    """The existing folder configured for `key` (a `kind` such as "dataset" or "model")."""
    if key not in mapping:
        field = f"{kind}s"
        raise error(f'{path}: no {kind} "{key}" configured; add "{field}": {{"{key}": "/path/to/folder"}}')
    folder = Path(mapping[key].replace("{site_name}", site_name)).expanduser()
    if not folder.is_dir():
        raise error(f'{path}: {kind} "{key}" points to {folder}, which is not a folder')
    return folder


def write_folder_map(path: Path, field: str, mapping: dict[str, str], device: str, error: type[ValueError],
                     settings: Mapping[str, Any] | None = None) -> Path:
    if device not in DEVICES:
        raise error(f"device {device!r} is not one of {list(DEVICES)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({field: mapping, "device": device, **(settings or {})}, indent=2) + "\n")
    return path
