"""A job kind's parameters: one typed, torch-free dataclass per kind, declared once, read by every side.

Each field is a parameter with its type, default, help, allowed values and bounds; `check` holds the rules that
involve several fields. The same object drives the admin's command line and docs (`jobs`), travels whole in the job's
configuration to the server's workflow and the sites' task, which rebuild and validate it (`job_params`), and is
what the site's guard reads for the job's privacy. Adding a parameter is one field here plus its use.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

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


@dataclass(frozen=True)
class RoundParams(FederationParams):
    """What the kinds that train over rounds share: how long a round waits for missing sites to come back."""

    quorum_wait_s: float = param(180.0, "seconds a round waits, when fewer than min_clients sites answered, for the "
                                        "missing sites to come back (a network outage, a VPN renegotiation) before "
                                        "the job stops naming them; 0 = stop at once", low=0.0)


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


def parameter_fields(params: type[JobParams]) -> list[dataclasses.Field[Any]]:
    """A kind's parameters in the order its spec declares them, the ones every kind shares last."""
    shared = {f.name for f in dataclasses.fields(RoundParams)}
    fields = dataclasses.fields(params)
    return [f for f in fields if f.name not in shared] + [f for f in fields if f.name in shared]


def default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"parameter {f.name} has no default")


def params_from_json(params: type[P], values: Mapping[str, Any]) -> P:
    """Rebuild `params` from the JSON a job carries (lists become tuples); ParameterError naming an unknown field
    or a value outside what the kind accepts."""
    names = {f.name for f in dataclasses.fields(params)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ParameterError(f"unknown parameters {unknown} for {params.__name__}; rebuild the job with this "
                             "site_agent version")
    return params(**dict(values))


def params_to_json(params: JobParams) -> dict[str, Any]:
    """Every field's value as the job's JSON carries it (tuples as lists)."""
    return {f.name: _json_value(getattr(params, f.name)) for f in dataclasses.fields(params)}


def _json_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
