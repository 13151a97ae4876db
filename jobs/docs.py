"""The parameter tables in docs/job-parameters.md, generated from the job kinds' specs (`fl-job docs`)."""

from __future__ import annotations

import typing
from typing import Any

from fl_contract.params import default_of, parameter_fields
from jobs.registry import kinds
from jobs.spec import JobKind

DOCS_FILE = "docs/job-parameters.md"
HEADER = """# Job parameters

Generated from the job kinds' parameters (`fl_contract/job_params/`) by \
`fl-job docs --out docs/job-parameters.md`; a test
regenerates it and compares. Every parameter is an `fl-job export|submit|simulate KIND` option (`--num-rounds`
for `num_rounds`); booleans take `--name` / `--no-name`, lists take several values.
"""


def parameter_tables() -> str:
    return "\n".join([HEADER, *(_kind_section(kind) for kind in kinds().values())])


def _kind_section(kind: JobKind[Any]) -> str:
    hints = typing.get_type_hints(kind.params)
    guide = f" Guide: [{kind.guide.removeprefix('docs/')}]({kind.guide.removeprefix('docs/')})." if kind.guide else ""
    lines = [f"## `{kind.name}`", "", f"{kind.summary}.{guide}", "",
             f"Site task `{kind.site_task}`, server workflow `{kind.controller}`; dataset keys sites map: "
             f"{', '.join(f'`{k}`' for k in kind.dataset_keys) or 'none'}.", "",
             "| parameter | type | default | allowed | meaning |", "| --- | --- | --- | --- | --- |"]
    for f in parameter_fields(kind.params):
        lines.append(f"| `{f.name}` | {_type_name(hints[f.name])} | {_value(default_of(f))} | {_allowed(f.metadata)} | "
                     f"{f.metadata['help']} |")
    return "\n".join(lines) + "\n"


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "").replace("|", "or")


def _value(value: Any) -> str:
    if isinstance(value, tuple):
        return "`" + ",".join(map(str, value)) + "`"
    return "none" if value is None else ("empty" if value == "" else f"`{value}`")


def _allowed(meta: typing.Mapping[str, Any]) -> str:
    if meta.get("choices") is not None:
        return ", ".join(f"`{c}`" for c in meta["choices"])
    bounds = [f">= {meta['low']}" if meta.get("low") is not None else "",
              f"<= {meta['high']}" if meta.get("high") is not None else ""]
    return ", ".join(b for b in bounds if b)
