"""Docs stand alone: every repository path that a guide (*.md) or a docstring or comment of our Python names exists.

What counts as a reference to the repository, so that names of things outside it (a kit's `local/site_agent.json`,
FLARE's files, a URL, a hospital's `/data/...`) are left alone:

- a path whose first part is a top-level entry of the repository (`docs/algorithms.md`, `server_app/privacy/`);
- a markdown link target, relative to the guide it is in;
- a relative path ending in one of our source extensions (.py, .md, .sh, .toml, .yml) whose first folder is a folder
  of the repository (`tasks/executor.py`): a file ending in that path must exist (`startup/start.sh`, a kit's, and
  `nvflare/...`, FLARE's, name no folder of ours);
- a bare .py or .md file name (`fedavg.py`, `algorithms.md`): a file of that name must exist, unless our code writes
  a file of that name (a string constant of the packages: `report.md`, `dice.md`);
- a dotted module path of one of our packages (`jobs.common.build_job`): each part a sub-package, a module, or,
  after the module, an attribute (unchecked); a name not found as a module must be defined in its package's
  `__init__.py`;
- `#anchor` after a guide's name must be one of that guide's headings (GitHub's slugs).

Tokens with a placeholder (`<kind>`, `{site_name}`, `*`, `$VAR`, `~`), absolute paths and URLs are not references.
A relative path to a source file that climbs out of the repository (`../<elsewhere>/NOTES.md`) is always a problem:
the docs stand alone.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = tuple(pattern.rstrip("*") for pattern in  # every package pyproject.toml distributes
           tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"])
SOURCE_EXTENSIONS = (".py", ".md", ".sh", ".toml", ".yml")
DATA_EXTENSIONS = {"json", "yml", "yaml", "csv", "txt", "log", "npz", "png", "md", "py", "toml", "safetensors", "pt",
                   "nii", "gz", "dcm", "sh", "key", "crt", "pem", "whl"}
_SPLIT = re.compile(r"[\s`'\"(),;\[\]|]+")
_PLACEHOLDER = re.compile(r"[<>{}*$~=@\\]|://|\.\.\.")
_MODULE = re.compile(rf"^(?:{'|'.join(PACKAGES)})(?:\.\w+)+$")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


@cache
def tracked_files() -> tuple[str, ...]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    return tuple(name for name in listed if (ROOT / name).exists())


@cache
def top_level() -> frozenset[str]:
    return frozenset(name.split("/")[0] for name in tracked_files())


@cache
def folder_names() -> frozenset[str]:
    return frozenset(part for name in tracked_files() for part in name.split("/")[:-1])


@cache
def written_file_names() -> frozenset[str]:
    """Bare .md/.py file names in string constants of our packages: outputs our code writes, not our files."""
    return frozenset(node.value for package in PACKAGES for path in (ROOT / package).rglob("*.py")
                     for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)
                     and isinstance(node.value, str) and re.fullmatch(r"[\w.-]+\.(?:md|py)", node.value))


def _exists(relative: str) -> bool:
    path = ROOT / relative
    return path.exists() and path.resolve().is_relative_to(ROOT)


def slugs(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    found: set[str] = set()
    in_code = False
    for line in markdown.splitlines():
        in_code ^= line.startswith("```")
        if in_code or not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


def _anchor_problem(target: Path, anchor: str) -> str | None:
    if not anchor or target.suffix != ".md" or not target.is_file():
        return None
    return None if anchor in slugs(target.read_text()) else f"no heading #{anchor} in {target.relative_to(ROOT)}"


def _module_problem(dotted: str) -> str | None:
    parts = dotted.split(".")
    if parts[-1] in DATA_EXTENSIONS:  # site_agent.json: a file name, not a module
        return None
    folder = ROOT / parts[0]
    for part in parts[1:]:
        if (folder / part).is_dir():
            folder = folder / part
        elif (folder / f"{part}.py").is_file():
            return None  # the rest names attributes of that module
        elif re.search(rf"\b{re.escape(part)}\b", (folder / "__init__.py").read_text()):
            return None
        else:
            return f"{dotted}: no module or package {part!r} in {folder.relative_to(ROOT)}"
    return None


def path_problem(token: str, base: Path | None = None) -> str | None:
    """Why `token` names nothing in the repository, or None (also when it is no reference to the repository).
    `base`: the folder a markdown link is relative to."""
    token = token.rstrip(".,:;!?")
    if not token or _PLACEHOLDER.search(token) or token.startswith(("/", "-")):
        return None
    outside = not ((base or ROOT) / token.partition("#")[0]).resolve().is_relative_to(ROOT)
    if token.startswith("../") and token.partition("#")[0].endswith(SOURCE_EXTENSIONS) and outside:
        return f"{token} points outside the repository"
    if _MODULE.match(token):
        return _module_problem(token)
    name, _, anchor = token.partition("#")
    name = re.sub(r":\d+$", "", name)  # a line number after a file name
    if base is not None:
        target = (base / name).resolve() if name else None
        if target is not None and not (target.exists() and target.is_relative_to(ROOT)):
            return f"link {token}: no {name} beside {base.relative_to(ROOT)}"
        return _anchor_problem(target, anchor) if target is not None else None
    if "/" in name and name.split("/")[0] in top_level():
        return _anchor_problem(ROOT / name, anchor) if _exists(name) else f"{name} does not exist"
    if not re.fullmatch(r"[\w][\w./-]*", name):
        return None
    if "/" in name:
        if not name.endswith(SOURCE_EXTENSIONS) or name.split("/")[0] not in folder_names():
            return None
    elif not name.endswith((".py", ".md")) or name in written_file_names():
        return None
    matches = [f for f in tracked_files() if ("/" + f).endswith("/" + name)]
    if not matches:
        return f"{name}: no such file in the repository"
    return _anchor_problem(ROOT / matches[0], anchor) if len(matches) == 1 else None


def problems_in(text: str, where: str, markdown_dir: Path | None = None) -> list[str]:
    found = []
    if markdown_dir is not None:
        found += [f"{where}: {p}" for link in _LINK.findall(text) if not link.startswith(("http:", "https:", "#"))
                  if (p := path_problem(link, markdown_dir))]
        text = _LINK.sub("]", text)
    return found + [f"{where}: {p}" for token in _SPLIT.split(text) if (p := path_problem(token))]


def python_prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a Python module."""
    prose = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
             if t.type == tokenize.COMMENT]
    # a bare string statement: a module's, class's or function's docstring, or the one under a constant
    return prose + [(node.lineno, node.value.value) for node in ast.walk(ast.parse(source))
                    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)]


def test_every_path_named_in_the_guides_exists():
    guides = [f for f in tracked_files() if f.endswith(".md")]

    found = [problem for guide in guides
             for problem in problems_in((ROOT / guide).read_text(), guide, (ROOT / guide).parent)]

    assert len(guides) > 10
    assert found == []


def test_every_path_named_in_docstrings_and_comments_exists():
    modules = [f for f in tracked_files() if f.endswith(".py")]

    found = [problem for module in modules for line, text in python_prose((ROOT / module).read_text())
             for problem in problems_in(text, f"{module}:{line}")]

    assert len(modules) > 100
    assert found == []


def test_the_rule_names_a_missing_file_module_and_anchor_and_leaves_outside_names_alone():
    assert path_problem("server_app/privacy/unmask.py") == "server_app/privacy/unmask.py does not exist"
    assert path_problem("ALGORITHMS.md") == "ALGORITHMS.md: no such file in the repository"
    assert path_problem("docs/algorithms.md#nowhere") == "no heading #nowhere in docs/algorithms.md"
    assert path_problem("jobs.simulate.simulate") == "jobs.simulate.simulate: no module or package 'simulate' in jobs"
    assert path_problem("nowhere.md", ROOT / "docs") == "link nowhere.md: no nowhere.md beside docs"
    assert path_problem("../shared/NOTES.md") == "../shared/NOTES.md points outside the repository"
    assert path_problem("../README.md", ROOT / "docs") is None and path_problem("../../../etc") is None
    for fine in ("docs/algorithms.md#fedavg-reference-run", "tasks/executor.py", "jobs.common.build_job",
                 "federation_tools/", "fl_contract.fedkt_csd.COUNT_NOISE_MULTIPLIER", "algorithms.md#player-fl"):
        assert path_problem(fine) is None, fine
    for outside in ("<kit>/local/site_agent.json", "site_agent.json", "/data/derm", "startup/start.sh", "report.md",
                    "nvflare/private/fed/client/fed_client_base.py", "sub_start.sh",
                    "https://github.com/NVIDIA/NVFlare", "jobs/<kind>/spec.py", "mit-han-lab/efficientvit",
                    "--data", "isic=/data/derm", "results.json"):
        assert path_problem(outside) is None, outside
