"""One job of `fl-demo`: how each site makes its data, which parameters the admin submits, what to print at the end.

Each module of federation_tools.demos lists a job kind's DemoJob entries (`DEMOS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fl_contract.params import JobParams

if TYPE_CHECKING:
    from federation_tools.admin import JobOutcome


@dataclass(frozen=True)
class DemoJob:
    name: str
    kind: str
    params: JobParams
    make_site_data: Callable[[int, str, Path], dict[str, str]]  # (1-based index, site, data root) -> dataset folders
    summarise: Callable[[JobOutcome], str]
    server_models: Callable[[Path], dict[str, str]] | None = None  # (data root) -> model folders for server_app.json
    model_from: str | None = None
    """The earlier demo job whose server folder (its results, best model) is the model this job's `model` key names:
    the demo maps the key to it in server_app.json once that job has finished, as the lead would."""
