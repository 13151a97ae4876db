"""Thin FLARE glue for site tasks: Shareable <-> FLModel, site context, clear errors.

Site tasks are installed classes (no job-shipped code), so they subclass FLARE's `Executor` directly rather than
using the Client API's `ScriptRunner`, which copies a script into the job (BYOC). A task implements `train`
(and optionally other task names) as plain methods on `FLModel`; everything FLARE-specific stays here.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from nvflare.apis.event_type import EventType
from nvflare.apis.executor import Executor
from nvflare.apis.fl_constant import FLContextKey, ReturnCode
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable, make_reply
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel
from nvflare.app_common.decomposers import common_decomposers
from nvflare.app_common.tracking.log_writer import LogWriter
from nvflare.app_common.utils.fl_model_utils import FLModelUtils
from nvflare.fuel.utils import fobs

from fl_contract.device import describe_device, select_device
from fl_contract.job_privacy import WEIGHTS, SitePrivacy
from fl_contract.masked_weights import TASK_MASKED, TRAIN_TASK, SecureWeightsParams
from fl_contract.secure_aggregation_messages import SESSION
from fl_contract.weights_encoding import FLOAT32, decode_model, encode_update, encoding_of
from site_agent.kit.site_config import CONFIG_FILE, SiteConfig
from site_agent.privacy.audit import RESULT_SENT, TASK_RECEIVED, AuditLog
from site_agent.privacy.policy import PolicyInForce, SitePolicy
from site_agent.secure_aggregation.masked_updates import TASKS as MASKING_TASKS
from site_agent.secure_aggregation.masked_updates import MaskedUpdates


@dataclass(frozen=True)
class SiteContext:
    """What a task may know about where it runs: its name, its configured data, its device, its workspace, the job."""

    site_name: str
    config: SiteConfig
    device: torch.device
    workspace_dir: Path
    abort_signal: Signal
    job_id: str = "job"

    def data_dir(self, dataset: str) -> Path:
        return self.config.data_dir(dataset, self.site_name)

    @property
    def local_dir(self) -> Path:
        """The kit's local/ folder, where site IT's site_agent.json and the privacy officer's policy lie."""
        return self.config.path.parent

    def policy(self) -> SitePolicy:
        """The site's policy as it is now (an edit by the privacy officer applies to the next answer); RuntimeError
        naming the file's problem when there is none: the guard refuses such a job at start, and no task sends
        under a policy that is not there."""
        site = PolicyInForce.read(self.local_dir)
        if site.policy is None:
            raise RuntimeError(site.problem)
        return site.policy


class TaskExecutor(Executor):  # type: ignore[misc]  # FLARE ships no type information: Executor is Any
    """Dispatches FLARE task names to methods `task_<name>(model, ctx) -> FLModel` of the subclass.

    Every result that leaves is recorded in the site's audit log (bytes and sha256 of its serialised payload). A job
    with client-side DP is charged by the site for its declared rounds, so the task sends at most that many weight
    updates, whatever the server asks. A job whose parameters say `secure_aggregation` never sends weights in the
    clear: the `train` answer becomes the site's keys and the update leaves only masked
    (`site_agent.secure_aggregation.masked_updates`).
    """

    RELEASE: ClassVar[str] = WEIGHTS
    """What the task sends (fl_contract.job_privacy): jobs declare it, the site guard checks it when the job starts."""

    def __init__(self, seed: int):
        super().__init__()
        self.seed = seed
        self._audit_notes: dict[str, str] = {}
        self._weight_updates_sent = 0
        self._masked: MaskedUpdates | None = None
        self._round: int | None = None  # of the task being answered, for the audit log

    def note_for_audit(self, **facts: str) -> None:
        """Facts about the result being built that the site's audit log keeps with it (never sent)."""
        self._audit_notes.update(facts)

    def site_context(self, fl_ctx: FLContext, abort_signal: Signal) -> SiteContext:
        workspace = fl_ctx.get_engine().get_workspace()
        config = SiteConfig.load(Path(workspace.get_site_config_dir()) / CONFIG_FILE)
        device = select_device(config.device)
        return SiteContext(
            site_name=fl_ctx.get_identity_name(),
            config=config,
            device=device,
            workspace_dir=Path(workspace.get_root_dir()),
            abort_signal=abort_signal,
            job_id=str(fl_ctx.get_job_id() or "job"),
        )

    def execute(self, task_name: str, shareable: Shareable, fl_ctx: FLContext, abort_signal: Signal) -> Shareable:
        """FLARE's entry: audit what arrived, answer it with `task_<name>` (through secure aggregation and the
        weights' encoding when the job says so), audit what leaves; a failure becomes a reply naming the site."""
        if not self.has_task(task_name):
            self.log_error(fl_ctx, f"{type(self).__name__} has no task {task_name!r}")
            return make_reply(ReturnCode.TASK_UNKNOWN)
        self._audit_notes = {}
        try:
            received = FLModelUtils.from_shareable(shareable)
            self._audit_received(task_name, received, fl_ctx)
            ctx = self.site_context(fl_ctx, abort_signal)
            self.log_info(fl_ctx, f"task {task_name}: running on {describe_device(ctx.device)}")
            torch.manual_seed(self.seed)
            result = self.answer(task_name, received, ctx)
            if self._masking(ctx.site_name) is None or task_name == TASK_MASKED:
                self._count_dp_update(result, fl_ctx)
        except Exception as exc:  # the reason must reach the site's log and the admin, not vanish in a traceback
            self.log_exception(fl_ctx, f"task {task_name} failed at site {fl_ctx.get_identity_name()}: {exc}")
            return make_reply(ReturnCode.EXECUTION_EXCEPTION)
        if abort_signal.triggered:
            return make_reply(ReturnCode.TASK_ABORTED)
        reply = FLModelUtils.to_shareable(result)
        self._audit_result(task_name, reply, fl_ctx)
        return reply

    def has_task(self, task_name: str) -> bool:
        """The task is this kind's (`task_<name>`), or one of a masked round's later steps when the job masks."""
        masked = isinstance(getattr(self, "job", None), SecureWeightsParams) and self.job.secure_aggregation
        return hasattr(self, f"task_{task_name}") or (masked and task_name in MASKING_TASKS)

    def answer(self, task_name: str, received: FLModel, ctx: SiteContext) -> FLModel:
        """What the site sends for `task_name`: the kind's own answer, except that with `secure_aggregation` the
        training answer becomes the site's keys and the masked round's later tasks are answered here. With
        `weights_encoding` float16 the task sees the received model decoded to float32, and the weights it answers
        with leave as their float16 difference from that model."""
        masking = self._masking(ctx.site_name)
        if masking is not None and task_name in MASKING_TASKS:
            if task_name == TASK_MASKED:
                self.note_for_audit(masked="secure aggregation", session=str(received.meta[SESSION]))
            return masking.answer(task_name, received)
        encoding = self.weights_encoding
        if encoding != FLOAT32 and received.params:
            received = copy.copy(received)
            received.params = decode_model(received.params, encoding)
        trained: FLModel = getattr(self, f"task_{task_name}")(received, ctx)
        if masking is not None and task_name == TRAIN_TASK:
            return masking.begin(received, trained, ctx.workspace_dir)
        if encoding != FLOAT32 and trained.params:
            trained.params = encode_update(received.params or {}, trained.params, encoding)
        return trained

    @property
    def weights_encoding(self) -> str:
        """The dtype weights cross the wire in (the job's `weights_encoding`): with float16 the site decodes the
        models it receives and answers with the float16 difference (fl_contract.weights_encoding)."""
        return encoding_of(getattr(self, "job", None))

    def _masking(self, site: str) -> MaskedUpdates | None:
        """The site's masked rounds when the job's parameters (`self.job`, set by the kind's task) say so."""
        job = getattr(self, "job", None)
        if self._masked is None and isinstance(job, SecureWeightsParams) and job.secure_aggregation:
            self._masked = MaskedUpdates(site, job.update_l2_bound)
        return self._masked

    def _count_dp_update(self, result: FLModel, fl_ctx: FLContext) -> None:
        """Refuse to send more DP weight updates than the rounds the job declared (and the site charged)."""
        try:
            privacy = SitePrivacy.from_meta(fl_ctx.get_prop(FLContextKey.JOB_META) or {})
        except ValueError:
            return  # no declaration: not a job the site's guard admitted with a DP charge
        if not (privacy.client_dp and result.params):
            return
        if self._weight_updates_sent >= privacy.num_rounds:
            raise RuntimeError(f"the job declared {privacy.num_rounds} rounds of client-side DP "
                               "and the site charged its budget for that many; it sends no further update")
        self._weight_updates_sent += 1

    def _audit_log(self, fl_ctx: FLContext) -> AuditLog:
        return AuditLog(PolicyInForce.read(Path(fl_ctx.get_engine().get_workspace().get_site_config_dir())).records)

    def _audit_received(self, task_name: str, received: FLModel, fl_ctx: FLContext) -> None:
        """What reached the site: the task, its round (counted from 1, as results.json counts; FLARE's wire counts
        from 0) and the bytes of the arrays it carries (the site's status page shows the job's round from it, while
        the site still works on that round)."""
        self._round = None if received.current_round is None else received.current_round + 1
        arrays = sum(int(getattr(v, "nbytes", 0)) for v in (received.params or {}).values())
        self._audit_log(fl_ctx).record(TASK_RECEIVED, str(fl_ctx.get_job_id()), task=task_name, round=self._round,
                                       array_bytes=arrays)

    def _audit_result(self, task_name: str, reply: Shareable, fl_ctx: FLContext) -> None:
        common_decomposers.register()
        payload = fobs.dumps(reply)
        self._audit_log(fl_ctx).record(
            RESULT_SENT, str(fl_ctx.get_job_id()), task=task_name, round=self._round, payload_bytes=len(payload),
            payload_sha256=hashlib.sha256(payload).hexdigest(), **self._audit_notes)

    def task_train(self, model: FLModel, ctx: SiteContext) -> FLModel:
        raise NotImplementedError


class TrackedTask(TaskExecutor):
    """A site task that sends its metrics to TensorBoard through FLARE's experiment tracking when the job names a
    writer component (`analytic_sender_id`; empty = no tracking); FLARE's receiver files them per site."""

    def __init__(self, seed: int, analytic_sender_id: str):
        super().__init__(seed=seed)
        self.analytic_sender_id = analytic_sender_id
        self._writer: LogWriter | None = None

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        if event_type == EventType.START_RUN and self.analytic_sender_id:
            self._writer = fl_ctx.get_engine().get_component(self.analytic_sender_id)
            if self._writer is None:
                self.system_panic(
                    f"the job names tracking component {self.analytic_sender_id!r} but does not define it", fl_ctx
                )

    def track(self, metrics: dict[str, float], step: int) -> None:
        """Each metric to the job's writer at `step` (the round it describes)."""
        if self._writer is None:
            return
        for tag, value in metrics.items():
            self._writer.add_scalar(tag, value, global_step=step)
