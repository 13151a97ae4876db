"""Command-line options derived from a job kind's parameters: one option per field, its type, default and help."""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from typing import Any

from fl_contract.params import JobParams, P, ParameterError, default_of, parameter_fields
from jobs.spec import JobKind


def add_parameter_options(parser: argparse.ArgumentParser, params: type[JobParams]) -> None:
    """`--name-of-field` per parameter. Unset options stay unset, so the dataclass default is the only default."""
    hints = typing.get_type_hints(params)
    for f in parameter_fields(params):
        flag = "--" + f.name.replace("_", "-")
        hint, default, meta = hints[f.name], default_of(f), f.metadata
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        help_text = f"{meta['help']} (default: {shown})" if default not in ("", None) else meta["help"]
        options: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "help": help_text}
        kind = _value_type(hint)
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif _is_tuple(hint):
            options.update(nargs="+", type=kind if kind is not str else _comma_list,
                           metavar=meta.get("metavar") or kind.__name__.upper())
        else:
            options.update(type=json.loads if kind is dict else kind, metavar=meta.get("metavar"))
            if meta.get("choices") is not None:
                options["choices"] = list(meta["choices"])
        parser.add_argument(flag, **options)


def params_from_args(kind: JobKind[P], args: argparse.Namespace, parser: argparse.ArgumentParser) -> P:
    """The kind's parameters from parsed options; a value the kind refuses ends the command with its reason."""
    names = {f.name for f in dataclasses.fields(kind.params)}
    values = {}
    for name, value in vars(args).items():
        if name in names:
            values[name] = (_flatten(value) if isinstance(value, list) and value and isinstance(value[0], list)
                            else value)
    try:
        return kind.params(**values)
    except ParameterError as exc:
        parser.error(f"{kind.name}: {exc}")
        raise  # parser.error exits; this keeps type checkers informed


def _value_type(hint: Any) -> Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is tuple:
        return args[0]
    if args and typing.get_origin(hint) is not dict:
        return _value_type(args[0])
    return typing.get_origin(hint) or hint


def _is_tuple(hint: Any) -> bool:
    return typing.get_origin(hint) is tuple


def _comma_list(text: str) -> list[str]:
    """`--classes BCC,BKL MEL` and `--classes BCC BKL MEL` give the same list."""
    return [item.strip() for item in text.split(",") if item.strip()]


def _flatten(values: list[list[Any]]) -> list[Any]:
    return [item for group in values for item in group]
