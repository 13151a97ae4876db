"""What a site task records when its result leaves (and, for FedKT-CSD, the hash the privacy officer matches with the
reviewed export), and the DP rounds it refuses to exceed; through FLARE's execute path, without processes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from nvflare.apis.fl_constant import FLContextKey, ReservedKey, ReturnCode
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable
from nvflare.apis.signal import Signal
from nvflare.apis.workspace import Workspace
from nvflare.app_common.abstract.fl_model import FLModel
from nvflare.app_common.decomposers import common_decomposers
from nvflare.app_common.utils.fl_model_utils import FLModelUtils
from nvflare.fuel.utils import fobs
from support import FedKTRelay

from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.fedkt_csd import protocol
from fl_contract.job_privacy import DP_STATISTICS, WEIGHTS, SitePrivacy
from fl_contract.models.dcae import build_tiny_dcae, load_autoencoder, save_autoencoder
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from jobs.fedkt_csd.spec import KIND as FEDKT_CSD
from jobs.fedkt_csd.spec import FedKTCSDParams
from site_agent.cli import main
from site_agent.data.demo.linear_demo import write_linear_site
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.fedkt_csd.export import METADATA_FILE
from site_agent.kit.site_config import SiteConfig, write_site_config
from site_agent.privacy.audit import RESULT_SENT, TASK_RECEIVED, AuditLog
from site_agent.tasks.executor import SiteContext


def _fl_ctx(kit: Path, privacy: SitePrivacy) -> FLContext:
    (kit / "startup").mkdir(exist_ok=True)  # FLARE's Workspace requires it
    fl_ctx = FLContext()
    engine = SimpleNamespace(get_workspace=lambda: Workspace(str(kit), "site-1"))
    fl_ctx.set_prop(ReservedKey.ENGINE, engine, private=True, sticky=False)
    fl_ctx.set_prop(ReservedKey.IDENTITY_NAME, "site-1", private=False, sticky=False)
    fl_ctx.set_prop(ReservedKey.RUN_NUM, "job-1", private=False, sticky=False)
    fl_ctx.set_prop(FLContextKey.JOB_META, {"site_agent_version": "x", **privacy.meta()}, private=True, sticky=False)
    return fl_ctx


def _train(task, fl_ctx: FLContext) -> Shareable:
    task_data = FLModelUtils.to_shareable(FLModel(params={"weight": np.zeros((1, 2), np.float32)}, current_round=3))
    return task.execute("train", task_data, fl_ctx, Signal())


def test_every_result_that_leaves_is_in_the_audit_log_with_its_size_and_hash(tmp_path):
    write_site_config(tmp_path, {"linear": str(write_linear_site(tmp_path / "data", 1).parent)})
    task = KIND.site_task_component(FedAvgLinearParams()).instantiate()

    reply = _train(task, _fl_ctx(tmp_path, SitePrivacy("fedavg-linear", WEIGHTS, num_rounds=5)))

    common_decomposers.register()
    payload = fobs.dumps(reply)
    received, entry = AuditLog(tmp_path / "local").entries("job-1")
    assert received["event"] == TASK_RECEIVED and received["task"] == "train" and received["array_bytes"] == 8
    assert entry["event"] == RESULT_SENT and entry["task"] == "train" and entry["round"] == received["round"] == 4
    assert entry["payload_bytes"] == len(payload) and entry["payload_sha256"] == hashlib.sha256(payload).hexdigest()


def test_a_dp_job_sends_no_more_updates_than_the_rounds_it_declared(tmp_path):
    write_site_config(tmp_path, {"linear": str(write_linear_site(tmp_path / "data", 1).parent)})
    task = KIND.site_task_component(FedAvgLinearParams()).instantiate()
    fl_ctx = _fl_ctx(tmp_path, SitePrivacy("fedavg-linear", WEIGHTS, dp_clip_norm=1.0, dp_noise_multiplier=1.0,
                                           num_rounds=2))

    replies = [_train(task, fl_ctx) for _ in range(3)]

    assert [r.get_return_code() for r in replies] == [ReturnCode.OK, ReturnCode.OK, ReturnCode.EXECUTION_EXCEPTION]
    assert len([e for e in AuditLog(tmp_path / "local").entries("job-1") if e["event"] == RESULT_SENT]) == 2


def test_the_fedkt_csd_statistics_hash_in_the_audit_log_matches_the_reviewed_export(tmp_path):
    autoencoder = save_autoencoder(build_tiny_dcae(0), tmp_path / "tiny-dcae", clip_norm=40.0, provenance="test")
    write_site_config(tmp_path, {"isic": str(write_isic_site(tmp_path / "isic", 2, 3, 16, alpha=10.0)),
                                 "dcae": str(autoencoder)})
    assert main(["fedkt", "export", "--kit", str(tmp_path), "--site", "site-1",
                 "--out", str(tmp_path / "reviewed")]) == 0
    reviewed = json.loads((tmp_path / "reviewed" / METADATA_FILE).read_text())["payload_sha256"]
    task = FEDKT_CSD.site_task_component(FedKTCSDParams()).instantiate()
    fl_ctx = _fl_ctx(tmp_path, SitePrivacy("fedkt-csd", DP_STATISTICS, epsilon=10.0, delta=1e-5, min_clients=3))
    identity = load_autoencoder(autoencoder).identity
    announcement = protocol.announcement("s", list(PLAYERFL_CLASSES), 64, identity)

    peers = {name: FEDKT_CSD.site_task_component(FedKTCSDParams()).instantiate() for name in ("site-2", "site-3")}
    contexts = {name: SiteContext(name, SiteConfig.for_kit(tmp_path), torch.device("cpu"), tmp_path, Signal())
                for name in peers}
    relay = FedKTRelay({**peers, "site-1": _Executed(task, fl_ctx)}, {**contexts, "site-1": None})

    relay.secure_sum(FLModel(params={}, meta=announcement))

    sent = [e for e in AuditLog(tmp_path / "local").entries("job-1")
            if e["task"] == "statistics" and e["event"] == RESULT_SENT]
    assert [e["statistics_sha256"] for e in sent] == [reviewed]
    assert sent[0]["payload_sha256"] != reviewed  # what left is masked


class _Executed:
    """A site task reached through FLARE's `execute`, as the job runs it (audit log included)."""

    def __init__(self, task: Any, fl_ctx: Any):
        self.task, self.fl_ctx = task, fl_ctx

    def __getattr__(self, name: str) -> Any:
        task_name = name.removeprefix("task_")

        def run(model: FLModel, _ctx: object) -> FLModel:
            reply = self.task.execute(task_name, FLModelUtils.to_shareable(model), self.fl_ctx, Signal())
            return FLModelUtils.from_shareable(reply)
        return run
