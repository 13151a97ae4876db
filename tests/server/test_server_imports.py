"""DESIGN: server_app sees only what sites send, so it must never import the code that reads patient data."""

import subprocess
import sys
from pathlib import Path

import server_app

PATIENT_DATA_MODULES = ("site_agent.data", "site_agent.tasks", "site_agent.segmentation.data", "site_agent.playerfl.data",
                        "site_agent.fedkt.site_data", "site_agent.fedkt.export")
# label conventions (BraTS region names) are shared vocabulary, not readers; the data package's __init__ is empty
SHARED = {"site_agent.data", "site_agent.data.labels"}


def test_server_app_does_not_load_patient_data_readers():
    modules = sorted(
        "server_app." + ".".join(p.relative_to(Path(server_app.__file__).parent).with_suffix("").parts)
        for p in Path(server_app.__file__).parent.rglob("*.py") if p.name != "__init__.py"
    )
    program = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules) + \
        "print('\\n'.join(sorted(sys.modules)))"

    loaded = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.split()

    assert len(modules) > 10
    assert [m for m in loaded if m.startswith(PATIENT_DATA_MODULES) and m not in SHARED] == []
