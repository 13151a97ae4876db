"""A job process imports only what its kind needs: MONAI (about 3 CPU-seconds a process, see bench/README.md) is loaded
by the kinds whose model is MONAI's, not by fedavg-linear's server and site."""

from __future__ import annotations

import importlib
import subprocess
import sys

from fl_contract.models import registry

LINEAR_JOB = """
import sys
import server_app.fedavg, site_agent.tasks.fedavg_linear
from fl_contract.models import build_model
build_model("linear_regression", in_features=2)
print("MONAI", "monai" in sys.modules)
"""


def test_linear_job_components_load_no_monai():
    out = subprocess.run([sys.executable, "-c", LINEAR_JOB], capture_output=True, text=True, check=True).stdout

    assert "MONAI False" in out, out[-500:]


def test_every_registered_model_names_a_factory():
    for name, (module, function) in registry._FACTORIES.items():
        assert callable(getattr(importlib.import_module(module), function)), name
