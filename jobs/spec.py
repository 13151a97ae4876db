"""A job kind, declared once: its parameters, the classes it runs at sites and on the server, its dataset keys.

Everything an admin or the lead meets is derived from these declarations: `fl-job` options and `--help`, the
exported job folder, the class allow-lists `fl-provision` writes into every kit and the parameter
tables in docs/. A parameter is one dataclass field (type, default, help, allowed values); nothing else repeats it.

Spec modules import no torch, MONAI or diffusers (classes are named by import path), so the command line stays fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from fl_contract.job_params import job_component_args
from fl_contract.params import P


@dataclass(frozen=True)
class Component:
    """A class the job instantiates, by import path, with its constructor arguments (JSON values)."""

    path: str
    args: Mapping[str, Any]
    id: str | None = None

    def instantiate(self) -> Any:
        return import_class(self.path)(**self.args)


@dataclass(frozen=True)
class Extras:
    """FLARE helpers a job adds beside its workflow and site task (TensorBoard streaming, ...)."""

    server: Sequence[Component] = ()
    site: Sequence[Component] = ()


def no_extras(params: Any) -> Extras:
    return Extras()


@dataclass(frozen=True)
class JobKind(Generic[P]):
    """One job kind: its name, parameters, classes and dataset keys.

    `controller` (server) and `site_task` (sites) each take the kind's name and its whole parameter object
    (`fl_contract.job_params`), which they rebuild and validate; `extras` names the FLARE helpers a job adds.
    `site_classes` / `server_classes` list every further class its jobs may instantiate (FLARE's TensorBoard writer,
    ...) so the provisioned allow-lists admit exactly what the job kinds use. `dataset_keys` names the parameters
    whose values are keys sites map to local folders in their `site_agent.json`. `resumable`: its workflow
    checkpoints every round, so the server resumes it after a restart. (Its demo, if any, is a tool:
    federation_tools.demos.)
    """

    name: str
    summary: str
    params: type[P]
    controller: str
    site_task: str
    extras: Callable[[P], Extras] = no_extras
    dataset_keys: tuple[str, ...] = ()
    site_classes: tuple[str, ...] = ()
    server_classes: tuple[str, ...] = ()
    job_name: Callable[[P], str] | None = None
    resumable: bool = True
    guide: str = ""

    def name_for(self, params: P) -> str:
        return self.job_name(params) if self.job_name else self.name

    def controller_component(self, params: P) -> Component:
        return Component(self.controller, job_component_args(self.name, params))

    def site_task_component(self, params: P) -> Component:
        return Component(self.site_task, job_component_args(self.name, params))

    def datasets(self, params: P) -> list[str]:
        """The dataset keys a site must map for this job."""
        return [str(getattr(params, key)) for key in self.dataset_keys if getattr(params, key)]


def import_class(path: str) -> Any:
    """The class named by an import path such as `site_agent.tasks.playerfl.PLayerFLTask`."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)
