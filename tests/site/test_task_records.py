"""What a site task records when its result leaves, and the DP rounds it refuses to exceed (FLARE's execute path)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from nvflare.apis.fl_constant import FLContextKey, ReservedKey, ReturnCode
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable
from nvflare.apis.signal import Signal
from nvflare.apis.workspace import Workspace
from nvflare.app_common.abstract.fl_model import FLModel
from nvflare.app_common.decomposers import common_decomposers
from nvflare.app_common.utils.fl_model_utils import FLModelUtils
from nvflare.fuel.utils import fobs

from fl_contract.job_privacy import WEIGHTS, SitePrivacy
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from site_agent.audit import RESULT_SENT, AuditLog
from site_agent.data.linear_demo import write_linear_site
from site_agent.site_config import write_site_config


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
    task_data = FLModelUtils.to_shareable(FLModel(params={"weight": np.zeros((1, 2), np.float32)}))
    return task.execute("train", task_data, fl_ctx, Signal())


def test_every_result_that_leaves_is_in_the_audit_log_with_its_size_and_hash(tmp_path):
    write_site_config(tmp_path, {"linear": str(write_linear_site(tmp_path / "data", 1).parent)})
    task = KIND.site_task_component(FedAvgLinearParams()).instantiate()

    reply = _train(task, _fl_ctx(tmp_path, SitePrivacy("fedavg-linear", WEIGHTS, num_rounds=5)))

    common_decomposers.register()
    payload = fobs.dumps(reply)
    [entry] = AuditLog(tmp_path / "local").entries("job-1")
    assert entry["event"] == RESULT_SENT and entry["task"] == "train"
    assert entry["payload_bytes"] == len(payload) and entry["payload_sha256"] == hashlib.sha256(payload).hexdigest()


def test_a_dp_job_sends_no_more_updates_than_the_rounds_it_declared(tmp_path):
    write_site_config(tmp_path, {"linear": str(write_linear_site(tmp_path / "data", 1).parent)})
    task = KIND.site_task_component(FedAvgLinearParams()).instantiate()
    fl_ctx = _fl_ctx(tmp_path, SitePrivacy("fedavg-linear", WEIGHTS, dp_clip_norm=1.0, dp_noise_multiplier=1.0, num_rounds=2))

    replies = [_train(task, fl_ctx) for _ in range(3)]

    assert [r.get_return_code() for r in replies] == [ReturnCode.OK, ReturnCode.OK, ReturnCode.EXECUTION_EXCEPTION]
    assert len(AuditLog(tmp_path / "local").entries("job-1")) == 2
