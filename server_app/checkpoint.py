"""What a server workflow keeps after every completed round, so that no completed round is lost.

FLARE 2.9 does not resume a job after the server restarts (its component snapshots were removed): the job's process
is gone. The workflow therefore writes its own checkpoint (round, results so far, global model, best model, and
whatever else it needs) into the server's workspace, outside the job's run folder, under a key derived from the
job's name and its full configuration. A job with the same name and configuration (the server's recovery clones
an interrupted job; an admin may resubmit it) starts from the last completed round. A finished job deletes its
checkpoint, so running the same job again starts afresh.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from server_app.aggregation import Params

CHECKPOINT_FOLDER = "checkpoints"
STATE_FILE = "state.json"


def run_key(job_name: str, config: Mapping[str, Any]) -> str:
    """Names one run of a job: its name and every configuration value (sorted JSON), hashed."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{job_name}-{digest}"


@dataclass(frozen=True)
class Resumed:
    """A checkpoint read back: the completed rounds, the workflow's own state, and its parameter sets by name."""

    completed_rounds: int
    state: dict[str, Any]
    params: dict[str, Params]


class RunCheckpoint:
    """One run's checkpoint folder; every write replaces the previous one atomically (write, then rename)."""

    def __init__(self, server_root: Path, key: str):
        self.folder = Path(server_root) / CHECKPOINT_FOLDER / key

    def load(self) -> Resumed | None:
        state_file = self.folder / STATE_FILE
        if not state_file.is_file():
            return None
        record = json.loads(state_file.read_text())
        params = {}
        for name in record["params"]:
            with np.load(self.folder / f"{name}.npz") as arrays:
                params[name] = {k: arrays[k] for k in arrays.files}
        return Resumed(int(record["completed_rounds"]), dict(record["state"]), params)

    def save(self, completed_rounds: int, state: Mapping[str, Any], params: Mapping[str, Params]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for name, values in params.items():
            tmp = self.folder / f"{name}.tmp.npz"
            arrays: dict[str, Any] = {k: np.asarray(v) for k, v in values.items()}
            np.savez(tmp, **arrays)
            tmp.replace(self.folder / f"{name}.npz")
        record = {"completed_rounds": completed_rounds, "state": dict(state), "params": sorted(params)}
        tmp_state = self.folder / (STATE_FILE + ".tmp")
        tmp_state.write_text(json.dumps(record))
        tmp_state.replace(self.folder / STATE_FILE)

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def workflow_checkpoint(controller: Any, config: Mapping[str, Any]) -> RunCheckpoint:
    """The checkpoint of the job `controller` (a FLARE ModelController, started) runs with `config`."""
    from nvflare.apis.fl_constant import FLContextKey
    from nvflare.apis.job_def import JobMetaKey

    meta = controller.fl_ctx.get_prop(FLContextKey.JOB_META) or {}
    name = str(meta.get(JobMetaKey.JOB_NAME.value) or "job")
    root = Path(controller.engine.get_workspace().get_root_dir())
    return RunCheckpoint(root, run_key(name, config))
