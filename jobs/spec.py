"""A job kind, declared once: its parameters, the classes it runs at sites and on the server, its dataset keys.

Everything an admin or the lead meets is derived from these declarations: `fl-job` options and `--help`, the
exported job folder, the class allow-lists `fl-provision` writes into every kit, the demo list and the parameter
tables in docs/. A parameter is one dataclass field (type, default, help, allowed values); nothing else repeats it.

Spec modules import no torch, MONAI or diffusers (classes are named by import path), so the command line stays fast.
"""

from __future__ import annotations

import dataclasses
import importlib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

P = TypeVar("P", bound="JobParams")


def param(default: Any, help: str, *, choices: Sequence[Any] | None = None, low: float | None = None,
          high: float | None = None, metavar: str | None = None) -> Any:
    """One job parameter: its default, the help shown by `fl-job` and in docs/, and the values it may take.

    `low` / `high` are inclusive bounds. Lists and tuples become tuples (the params are frozen and hashable).
    """
    metadata = {"help": help, "choices": tuple(choices) if choices is not None else None, "low": low, "high": high,
                "metavar": metavar}
    if isinstance(default, (list, tuple)):
        frozen = tuple(default)
        return field(default_factory=lambda: frozen, metadata=metadata)
    return field(default=default, metadata=metadata)


class ParameterError(ValueError):
    """A job parameter outside what the job kind accepts; the message names the parameter and the allowed values."""


@dataclass(frozen=True)
class JobParams:
    """Base of every job kind's parameters: checks each field against its declared choices and bounds."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list):
                object.__setattr__(self, f.name, tuple(value))
                value = tuple(value)
            _check_type(f.name, value, hints[f.name])
            meta = f.metadata
            values = value if isinstance(value, tuple) else (value,)
            if meta.get("choices") is not None and any(v not in meta["choices"] for v in values):
                raise ParameterError(f"{f.name}={value!r}: choose from {list(meta['choices'])}")
            if meta.get("low") is not None and any(v < meta["low"] for v in values):
                raise ParameterError(f"{f.name}={value!r}: must be at least {meta['low']}")
            if meta.get("high") is not None and any(v > meta["high"] for v in values):
                raise ParameterError(f"{f.name}={value!r}: must be at most {meta['high']}")
        self.check()

    def check(self) -> None:
        """Rules that involve several parameters; raise ParameterError naming them."""

    def replace(self: P, **changes: Any) -> P:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class FederationParams(JobParams):
    """What every job kind's parameters share: how long the server keeps waiting for a site FLARE reports gone."""

    dead_site_grace_s: float = param(5.0, "seconds the server waits after FLARE reports a site's client or job process "
                                          "gone before the round goes on without it (FLARE's default: 60)", low=0.0)


def _check_type(name: str, value: Any, hint: Any) -> None:
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for option in options:
        if option is type(None) and value is None:
            return
        origin = typing.get_origin(option) or option
        if origin is tuple and isinstance(value, tuple):
            item = typing.get_args(option)[0]
            if all(_is(v, item) for v in value):
                return
        elif origin is not tuple and option is not type(None) and _is(value, origin):
            return
    raise ParameterError(f"{name}={value!r}: expected {hint}")


def _is(value: Any, kind: Any) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


@dataclass(frozen=True)
class Component:
    """A class the job instantiates, by import path, with its constructor arguments (JSON values)."""

    path: str
    args: Mapping[str, Any]
    id: str | None = None

    def instantiate(self) -> Any:
        return import_class(self.path)(**self.args)


@dataclass(frozen=True)
class Apps:
    """What one job instance runs: the server workflow, the site task, and FLARE helpers on either side."""

    controller: Mapping[str, Any]
    site_task: Mapping[str, Any]
    server_extras: Sequence[Component] = ()
    site_extras: Sequence[Component] = ()


@dataclass(frozen=True)
class JobKind(Generic[P]):
    """One job kind: its name, parameters, classes and dataset keys.

    `apps` turns parameters into the constructor arguments of `controller` (server) and `site_task` (sites);
    `site_classes` / `server_classes` list every further class its jobs may instantiate (FLARE's TensorBoard writer,
    ...) so the provisioned allow-lists admit exactly what the job kinds use. `dataset_keys` names the parameters
    whose values are keys sites map to local folders in their `site_agent.json`; `server_model_keys` the same for
    the server's `server_app.json`. `resumable`: its workflow checkpoints every round, so the server resumes it after
    a restart. `demo` is "module:attribute" of the kind's demo entries (a list of DemoJob).
    """

    name: str
    summary: str
    params: type[P]
    controller: str
    site_task: str
    apps: Callable[[P], Apps]
    dataset_keys: tuple[str, ...] = ()
    server_model_keys: tuple[str, ...] = ()
    site_classes: tuple[str, ...] = ()
    server_classes: tuple[str, ...] = ()
    job_name: Callable[[P], str] | None = None
    resumable: bool = True
    demo: str | None = None
    guide: str = ""

    def name_for(self, params: P) -> str:
        return self.job_name(params) if self.job_name else self.name

    def controller_component(self, params: P) -> Component:
        return Component(self.controller, dict(self.apps(params).controller))

    def site_task_component(self, params: P) -> Component:
        return Component(self.site_task, dict(self.apps(params).site_task))

    def datasets(self, params: P) -> list[str]:
        """The dataset keys a site must map for this job."""
        return [str(getattr(params, key)) for key in self.dataset_keys if getattr(params, key)]


def parameter_fields(params: type[JobParams]) -> list[dataclasses.Field[Any]]:
    """A kind's parameters in the order its spec declares them, the ones every kind shares last."""
    shared = {f.name for f in dataclasses.fields(FederationParams)}
    fields = dataclasses.fields(params)
    return [f for f in fields if f.name not in shared] + [f for f in fields if f.name in shared]


def default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"parameter {f.name} has no default")


def import_class(path: str) -> Any:
    """The class named by an import path such as `site_agent.tasks.playerfl.PLayerFLTask`."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)
