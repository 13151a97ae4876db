"""What a server workflow keeps after every completed round, so that no completed round is lost, and who may use it.

FLARE 2.9 does not resume a job after the server restarts (its component snapshots were removed): the job's process
is gone. The workflow therefore writes its own checkpoint (round, results so far, global model, best model, and
whatever else it needs) into the server's workspace, outside the job's run folder, in a folder named by the run's
first job id.

A checkpoint belongs to exactly one run. Only the copy of an interrupted job that the server's own recovery
(`server_app.recovery`) cloned at start-up may resume it: recovery writes, server-side, which clone resumes which
first run (`resumers/<clone id>`), so nothing a submitter writes into a job's meta can point a new job at another
run's checkpoint. A new submission, even of an identical job, starts afresh under its own id, and two jobs running
at once never share a folder. The checkpoint also holds a digest of the whole job as the server received it (every
app's files, the sites' configuration included; recorded by recovery when the job is deployed) and of the
workflow's own configuration; a resume whose digest differs is refused with the reason.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from server_app.aggregation import Weights

CHECKPOINT_FOLDER = "checkpoints"
STATE_FILE = "state.json"
RESUMERS_FOLDER = "resumers"
DIGESTS_FOLDER = "job-digests"


class ResumeRefused(RuntimeError):
    """A job may not resume the checkpoint it points at; the message says why and what to do."""


def config_digest(config: Mapping[str, Any]) -> str:
    """The sha256 of a configuration (sorted JSON)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def job_digest(apps: Mapping[str, bytes]) -> str:
    """The sha256 of a job's apps as FLARE stores them (each a zip of the app folder), over file names and contents,
    so the same job gives the same digest however it was zipped."""
    digest = hashlib.sha256()
    for app_name in sorted(apps):
        with zipfile.ZipFile(io.BytesIO(apps[app_name])) as archive:
            for name in sorted(n for n in archive.namelist() if not n.endswith("/")):
                digest.update(f"{app_name}\0{name}\0".encode())
                digest.update(hashlib.sha256(archive.read(name)).digest())
    return digest.hexdigest()


def checkpoint_root(server_root: Path) -> Path:
    return Path(server_root) / CHECKPOINT_FOLDER


def record_resumer(server_root: Path, clone_id: str, first_run: str) -> None:
    """Recovery's word that job `clone_id` resumes the run first submitted as `first_run` (server-side only)."""
    _write_private(checkpoint_root(server_root) / RESUMERS_FOLDER / clone_id, first_run)


def resumed_run(server_root: Path, job_id: str) -> str | None:
    """The first run that job `job_id` resumes, when recovery cloned it to resume one; None for a new run."""
    return _read(checkpoint_root(server_root) / RESUMERS_FOLDER / job_id)


def record_job_digest(server_root: Path, job_id: str, digest: str) -> None:
    """Recovery's digest of job `job_id` as deployed (all apps, sites' included)."""
    _write_private(checkpoint_root(server_root) / DIGESTS_FOLDER / job_id, digest)


def _read(path: Path) -> str | None:
    return path.read_text().strip() if path.is_file() else None


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(0o600)
    tmp.replace(path)


@dataclass(frozen=True)
class Resumed:
    """A checkpoint read back: the completed rounds, the workflow's own state, and its parameter sets by name."""

    completed_rounds: int
    state: dict[str, Any]
    params: dict[str, Weights]


class RunCheckpoint:
    """One run's checkpoint folder; every write replaces the previous one atomically (write, then rename).

    `first_run` names the folder (the run's first job id); `digest` identifies the job and workflow configuration.
    `resuming` is true for the recovery clone of an interrupted run: only then does `load` read anything back.
    """

    def __init__(self, server_root: Path, first_run: str, digest: str, resuming: bool):
        self.folder = checkpoint_root(server_root) / first_run
        self.first_run = first_run
        self.digest = digest
        self.resuming = resuming

    def load(self) -> Resumed | None:
        """The interrupted run's last completed round, for its recovery clone; None for a new run.

        Raises ResumeRefused when the checkpoint was written by a job of another configuration."""
        state_file = self.folder / STATE_FILE
        if not self.resuming or not state_file.is_file():
            return None
        record = json.loads(state_file.read_text())
        if record.get("digest") != self.digest:
            raise ResumeRefused(
                f"the checkpoint of run {self.first_run} was written by a job of another configuration (digest "
                f"{str(record.get('digest'))[:12]}, this job {self.digest[:12]}); it is not resumed: submit the job "
                "again to start a new run")
        params = {}
        for name in record["params"]:
            with np.load(self.folder / f"{name}.npz") as arrays:
                params[name] = {k: arrays[k] for k in arrays.files}
        return Resumed(int(record["completed_rounds"]), dict(record["state"]), params)

    def save(self, completed_rounds: int, state: Mapping[str, Any], params: Mapping[str, Weights]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name, values in params.items():
            tmp = self.folder / f"{name}.tmp.npz"
            arrays: dict[str, Any] = {k: np.asarray(v) for k, v in values.items()}
            np.savez(tmp, **arrays)
            tmp.chmod(0o600)
            tmp.replace(self.folder / f"{name}.npz")
        record = {"completed_rounds": completed_rounds, "digest": self.digest, "state": dict(state),
                  "params": sorted(params)}
        _write_private(self.folder / STATE_FILE, json.dumps(record))

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def run_checkpoint(server_root: Path, job_id: str, workflow_config: Mapping[str, Any]) -> RunCheckpoint:
    """The checkpoint of job `job_id`: its own for a new run, its first run's for a recovery clone."""
    first_run = resumed_run(server_root, job_id)
    deployed = _read(checkpoint_root(server_root) / DIGESTS_FOLDER / job_id) or ""
    digest = config_digest({"job": deployed, "workflow": dict(workflow_config)})
    return RunCheckpoint(server_root, first_run or job_id, digest, resuming=first_run is not None)


def workflow_checkpoint(controller: Any, config: Mapping[str, Any]) -> RunCheckpoint:
    """The checkpoint of the job `controller` (a FLARE ModelController, started) runs with `config`."""
    root = Path(controller.engine.get_workspace().get_root_dir())
    return run_checkpoint(root, str(controller.fl_ctx.get_job_id()), config)
