"""The everyday commands answer at once: listing job kinds and every `--help` import no torch, MONAI or diffusers."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "monai", "diffusers", "pydicom")
COMMANDS = [
    ("federation_tools.job_cli", ["list"]),
    ("federation_tools.job_cli", ["--help"]),
    ("federation_tools.job_cli", ["export", "brats-segmentation", "--help"]),
    ("site_agent.cli", ["--help"]),
    ("site_agent.cli", ["check", "--help"]),
    ("provisioning.provision", ["--help"]),
]


@pytest.mark.parametrize("module, argv", COMMANDS, ids=[" ".join([m, *a]) for m, a in COMMANDS])
def test_command_loads_no_heavy_library(module, argv):
    program = (f"import sys, importlib\nsys.argv = ['cmd', *{argv!r}]\n"
               f"try:\n    importlib.import_module({module!r}).main({argv!r})\nexcept SystemExit:\n    pass\n"
               f"print('LOADED', sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))")

    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout

    assert "LOADED []" in out, out[-500:]
