"""The one model an inference or evaluation job sends: a file in a folder the federation lead maps on the server,
checked against the job's architecture and label map before any site receives it.

The admin names the model by key and file name; the federation lead maps the key to a folder in the server's
`local/server_app.json` ("models"), e.g. the `app_server/` folder of a finished segmentation run, whose
`best_global_model.pt` is the model selected on validation; a TorchScript file of the same network serves as well
(its weights are read, its program never run). A job never carries a path or weights. When the
folder holds the run's `results.json`, what the job says the model was made with (`made_with`: a SegResNet's label
map and architecture, a classifier's network and image size) must be the run's: a model trained on BraTS 2021
labels scored or applied with BraTS 2023's would be silently wrong at every site.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_contract.job_params import HeldModelParams
from fl_contract.models import build_model, load_numpy_params
from server_app.aggregation import Weights
from server_app.results import RESULTS_FILE
from server_app.server_config import CONFIG_FILE, ServerConfig


def held_model(local_dir: Path, job: HeldModelParams) -> tuple[Weights, dict[str, Any]]:
    """The model's weights and its provenance (path, sha256, what the job says it was made with, and the run that
    made it when its results.json is beside it); ValueError or OSError naming the file and what to fix."""
    folder = ServerConfig.load(Path(local_dir) / CONFIG_FILE).model_dir(job.model)
    path = folder / job.model_file
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; copy the model there (e.g. a run's best_global_model.pt)")
    provenance: dict[str, Any] = {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                                  **job.made_with()}
    provenance |= _made_by(folder / RESULTS_FILE, job)
    params = {k: np.asarray(v.numpy()) for k, v in _state_dict(path).items()}
    network, arguments = job.model_spec()
    try:
        load_numpy_params(build_model(network, **arguments), params)
    except (ValueError, RuntimeError) as err:
        raise ValueError(f"{path} does not fit {network} with {arguments} (the run that made it records "
                         f"its arguments in results.json, job.model_args): {err}") from err
    return params, provenance


def _state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a state_dict file or of a TorchScript file (`torch.jit.save`, as vendors and model zoos ship
    a model). Of a TorchScript file only the weights are read: the program in it is never run, and the sites are
    sent the weights alone, so a site still runs only the network its agent builds. Anything else: ValueError."""
    if zipfile.is_zipfile(path) and any(name.endswith("/constants.pkl") for name in zipfile.ZipFile(path).namelist()):
        module = torch.jit.load(str(path), map_location="cpu")
        return {k: v.detach() for k, v in module.state_dict().items()}
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # torch.load of stray bytes raises anything (UnpicklingError, EOFError, IndexError...)
        raise ValueError(f"{path} is neither a state_dict (torch.save of model.state_dict()) nor a TorchScript "
                         f"file (torch.jit.save): {err}") from err
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path} holds a {type(state).__name__}, not a state_dict of tensors: save "
                         "model.state_dict(), or the model with torch.jit.save")
    return state


def _made_by(results: Path, job: HeldModelParams) -> dict[str, Any]:
    """The run beside the model, refused when its architecture or label map is not the job's; {} without one."""
    if not results.is_file():
        return {}
    try:
        record = json.loads(results.read_text())
        made = record["job"]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{results}: not the results.json of a run ({err}); remove it or replace it with the "
                         "run's own") from err
    mismatched = {name: (made.get(name), value) for name, value in job.made_with().items()
                  if name in made and _same(made[name]) != _same(value)}
    if mismatched:
        detail = ", ".join(f"{name} {was!r} (the job says {now!r})" for name, (was, now) in mismatched.items())
        raise ValueError(f"the model's run ({results}) was trained with {detail}: submit the job with the run's "
                         "values")
    run = {"results": str(results), "status": record.get("status"), "rounds": len(record.get("rounds") or [])}
    if isinstance(record.get("best_model"), dict):
        run["best_model"] = record["best_model"]
    return {"made_by": run}


def _same(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value
