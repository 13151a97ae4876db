"""The round loop every job kind that trains over rounds shares: written once, each kind overriding its steps.

NVFlare's `BaseFedAvg` and Flower's strategy hooks are the models. The loop resumes a run from its checkpoint
(only the recovery clone of that very run may: `server_app.checkpoint`), sends each round's task, stops on an abort,
takes the updates through the one intake (validation, site-name order), stops when fewer than `min_clients` valid
updates remain, records every site's outcome, aggregates, and checkpoints the completed round. A kind supplies:

- `setup` (the initial global state), `job_summary` (its configuration, for results.json and the checkpoint digest);
- `round_message`, `update_check` and `aggregate` (what a round sends, accepts and combines; `aggregate` also adds
  the kind's own fields to the round's entry); the base sends every task (`send`: the weights' encoding, the
  secure-aggregation session, one waiting policy);
- `checkpoint_state` / `restore` (what it needs to resume), `model_to_save` (the model a stop keeps);
- `before_rounds` (a fresh run's first step, e.g. a split chosen before training) and `finish_run` (final tasks);
- `secure_groups` (with `secure_aggregation`: the groups of parameters the masked vector is laid out in).

With the job's `secure_aggregation` on, each send of a round opens a fresh secure-aggregation session (job, round,
attempt) whose id and groups go with the training task (`send`), and the intake is the masked sum
(`server_app.masked_round`) instead of the sites' updates; everything else (quorum wait, outcomes, checkpoint,
resume) is the same. A resumed run starts its next round with new keys, like any round.

Every stop names each site's outcome. When FLARE itself ends the run (fewer live sites than the job's
`min_clients`: FLARE aborts it exactly as an admin's `abort_job` would), the workflow tells the two apart
(`server_app.site_watch`) and records "failed" with each site and what the server heard about it.
"""

from __future__ import annotations

import itertools
import time
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType

from fl_contract import secure_aggregation_messages as messages
from fl_contract.job_params import RoundJob
from fl_contract.masked_weights import GROUPS, TRAIN_TASK, SecureWeightsParams, WeightGroups
from fl_contract.secure_aggregation import SecureAggregationError
from fl_contract.weights_encoding import encode_model, encoding_of
from server_app.aggregation import (
    RoundIntake,
    UpdateCheck,
    Weights,
    encoded_updates,
    site_name,
    site_outcomes,
    take_updates,
)
from server_app.checkpoint import Resumed, ResumeRefused, RunCheckpoint, workflow_checkpoint
from server_app.masked_round import MetaCheck, masked_intake
from server_app.progress import round_progress
from server_app.results import RunRecorder
from server_app.site_watch import LATE_SITE_WAIT_S, SiteAwareController, in_words
from server_app.transfers import METER_ID, TransferMeter


@dataclass(frozen=True)
class RoundMessage:
    """What a round's training task sends: the global values and the kind's own meta (PLayer-FL: method, layers)."""

    params: Weights
    meta: dict[str, Any] = field(default_factory=dict)


class RoundInterrupted(RuntimeError):
    """The run was aborted (by the admin or by FLARE) during one of a masked round's secure-aggregation tasks."""


class RoundWorkflow(SiteAwareController):
    """A ModelController whose `run` is the shared round loop; subclasses set `job` (the kind's parameters, rebuilt
    from the job's JSON) in their constructor and implement the hooks."""

    job: RoundJob
    sent_params: Weights  # the global values the last training task sent (float32, before `wire`)
    _session: str  # masked rounds: this send's secure-aggregation session
    _sends: Iterator[int]  # every send of a round opens a new session
    _round_index: int  # the round being sent

    # --- the loop -------------------------------------------------------------------------------------------------

    def run(self) -> None:
        """The rounds every round-based kind shares, written once: resume from the checkpoint or start afresh, then
        each round send, take the updates (waiting for a quorum), record every site's outcome, aggregate and
        checkpoint; the kinds differ only in the hooks (setup, before_rounds, restore, aggregate, finish_run)."""
        torch.manual_seed(self.job.seed)
        self._sends, self._session, self.sent_params = itertools.count(1), "", {}
        self.setup()
        summary = self.job_summary()
        self.recorder = RunRecorder(Path(self.get_app_dir()), summary)
        self.checkpoint: RunCheckpoint = workflow_checkpoint(self, summary)
        try:
            resumed = self.checkpoint.load()
        except ResumeRefused as exc:
            return self.fail(str(exc))
        start = 0
        if resumed is not None:
            start = resumed.completed_rounds
            self.recorder.resume(resumed.state["rounds"], start)
            self.restore(resumed)
            self.info(f"resuming run {self.checkpoint.first_run} after round {start}")
        else:
            self.before_rounds()
        self.own_the_quorum()
        for round_index in range(start, self.job.num_rounds):
            intake, waited = self.run_round(round_index)
            if intake is None:
                return
            entry: dict[str, Any] = {"round": round_index + 1, **intake.record(), "outcomes": self.outcomes(intake),
                                     "ended_at": round(time.time(), 3)}  # wall clock: when its updates were all in
            if waited:
                entry["waited_for_sites"] = waited
            meter = self.engine.get_component(METER_ID)
            if isinstance(meter, TransferMeter):
                entry["transfers"] = meter.summary()["rounds"].get(str(round_index + 1), {})
            self.aggregate(round_index, intake, entry)
            # checkpoint first: a round results.json shows as completed is always one a restart resumes after
            state, params = self.checkpoint_state()
            self.checkpoint.save(round_index + 1, {"rounds": [*self.recorder.record["rounds"], entry], **state}, params)
            self.recorder.add_round(entry)
        if self.finish_run():
            self.checkpoint.clear()

    def run_round(self, round_index: int) -> tuple[RoundIntake | None, dict[str, Any]]:
        """Send the round and take its updates; with too few, wait up to `quorum_wait_s` for the missing sites to
        come back and send the round again. None when the run stopped (aborted, or the quorum did not return)."""
        deadline = time.monotonic() + self.job.quorum_wait_s
        waited: dict[str, Any] = {}
        while True:
            self._session = f"{self.fl_ctx.get_job_id()}/round-{round_index + 1}/send-{next(self._sends)}"
            self._round_index = round_index
            self.rejoined_sites(self.site_names())  # a site being deployed the job again takes part in this round
            message = self.round_message(round_index)
            sent_at = time.time()
            results = self.send(TRAIN_TASK, message.params, round_index, message.meta)
            if self.abort_signal.triggered:
                self.stopped(f"round {round_index + 1}", results, round_index)
                return None, waited
            try:
                intake = self.take_round(round_index, results)
            except RoundInterrupted:
                self.stopped(f"round {round_index + 1}'s secure aggregation", results, round_index)
                return None, waited
            except SecureAggregationError as err:
                self.fail(f"round {round_index + 1}: secure aggregation failed: {err}",
                          failed_round={"round": round_index + 1, "secure_aggregation": str(err)})
                return None, waited
            if len(intake.contributors) >= self.job.min_clients:
                return intake, waited
            outcomes = self.outcomes(intake)
            started = time.monotonic()
            back, awaited = self.await_sites(intake.no_result, deadline, sent_at)
            for site in awaited:
                waited[site] = round(waited.get(site, 0.0) + time.monotonic() - started, 1)
            if self.abort_signal.triggered:
                self.stopped(f"round {round_index + 1}", results, round_index)
                return None, waited
            if not back:
                gone = "; ".join(f"{site} gone {seconds:.0f} s" for site, seconds in waited.items())
                self.fail(f"round {round_index + 1}: only {len(intake.contributors)} valid updates, the job needs "
                          f"{self.job.min_clients}" + (f" (waited {self.job.quorum_wait_s:.0f} s: {gone})"
                                                       if waited else "") + f"; {in_words(outcomes)}",
                          failed_round={"round": round_index + 1, **intake.record(), "outcomes": outcomes,
                                        "waited_for_sites": waited})
                return None, waited
            self.info(f"round {round_index + 1}: {back} back; sending the round again")

    def progress(self) -> dict[str, Any]:
        """The run's rounds so far for the admin's `show_stats` (server_app.progress); {} before the loop starts."""
        recorder = getattr(self, "recorder", None)
        if recorder is None:
            return {}
        current = getattr(self, "_round_index", None)
        return round_progress(recorder.record, self.job.num_rounds, None if current is None else current + 1,
                              self._started_at)

    def take_round(self, round_index: int, results: list[FLModel]) -> RoundIntake:
        """The round's intake: the sites' validated updates, or with `secure_aggregation` their masked sum."""
        if not self.masked:
            return take_updates(results, self.site_names(), self.update_check(round_index), self.error,
                                decode=encoded_updates(self.sent_params, self.weights_encoding))
        groups = WeightGroups.of(self.secure_groups(), self.sent_params)
        return masked_intake(results, self.site_names(), self._session, self.job.min_clients, groups,
                             self._send_secure, self.info, self.warning, self.masked_answer_check(round_index))

    @property
    def masked(self) -> bool:
        """The job masks every update (its `secure_aggregation` parameter)."""
        return isinstance(self.job, SecureWeightsParams) and self.job.secure_aggregation

    @property
    def weights_encoding(self) -> str:
        """The dtype weights cross the wire in (the job's `weights_encoding`, fl_contract.weights_encoding)."""
        return encoding_of(self.job)

    def wire(self, params: Weights) -> Weights:
        """A model as it goes to the sites: in the job's `weights_encoding` (float16 halves its bytes; the global
        model itself stays float32, and with float16 the sites answer with differences from `sent_params`)."""
        return encode_model(params, self.weights_encoding)

    def send(self, task: str, params: Weights, round_index: int, meta: dict[str, Any] | None = None) -> list[FLModel]:
        """The one way a round-based workflow sends a task, and its one waiting policy: `params` in the job's weights
        encoding with `meta`, to every site; the answers of all, or of those in within `late_site_wait_s` once
        `min_clients` answered (a site FLARE deems dead ends the wait sooner). The training task also carries, with
        `secure_aggregation`, this send's session and the masked vector's groups, and its `params` become
        `sent_params` (what the sites' float16 differences are added to and the masked vector is laid out by)."""
        meta = dict(meta or {})
        if task == TRAIN_TASK:
            self.sent_params = params
            if self.masked:
                meta.update({messages.SESSION: self._session, GROUPS: [list(g) for g in self.secure_groups()]})
        model = FLModel(params=self.wire(params), params_type=ParamsType.FULL, current_round=round_index,
                        total_rounds=self.job.num_rounds, meta=meta)
        results = self.broadcast_model(data=model, task_name=task, min_responses=self.job.min_clients,
                                       wait_time_after_min_received=LATE_SITE_WAIT_S)
        return cast(list[FLModel], results)  # FLARE is untyped; broadcast_model returns List[FLModel]

    def _send_secure(self, task: str, data: FLModel, targets: list[str] | None) -> dict[str, FLModel]:
        """One secure-aggregation task to `targets`; the answers by site. Waits for all of them, or for
        `late_site_wait_s` once the threshold answered (a site FLARE deems dead ends it sooner)."""
        threshold = int(data.meta.get(messages.THRESHOLD, 0)) or self.job.min_clients
        data.current_round = self._round_index  # the round its bytes and time count towards (transfers.json)
        results = self.broadcast_model(data=data, task_name=task, targets=targets, min_responses=threshold,
                                       wait_time_after_min_received=LATE_SITE_WAIT_S)
        if self.abort_signal.triggered:
            raise RoundInterrupted(task)
        return {site_name(r): r for r in results}

    def await_sites(self, missing: list[str], deadline: float, sent_at: float) -> tuple[list[str], list[str]]:
        """The missing sites that came back before `deadline` (FLARE had deemed them disconnected and now hears their
        job again, or the server has deployed the job again to a site that registered again), once enough sites are
        live for the round; [] when the deadline passed first or the run was aborted. A site whose task failed, or
        that never went away, is not waited for: sending it the round again would only repeat its answer. A site
        whose job was started again after the round was sent (`sent_at`, wall clock) is back already: the round went
        to its old job process, so it is sent again (a race the restart test met: the site was back 3.8 s after it
        registered, before the round closed without it, and the round failed for want of it). Returns (the sites
        back, the sites waited for)."""
        failed = self.failed_sites()
        missing = [site for site in missing if site not in failed]
        gone = {site for site in missing if self.communicator.get_client_disconnect_time(site)} | \
            self.sites_being_redeployed(missing) | self.sites_rejoined_since(missing, sent_at)
        if not gone or time.monotonic() >= deadline:
            return [], []
        self.warning(f"fewer than {self.job.min_clients} sites answered; waiting up to "
                     f"{deadline - time.monotonic():.0f} s for {', '.join(sorted(gone))} to come back")
        while time.monotonic() < deadline and not self.abort_signal.triggered:
            redeploying = self.sites_being_redeployed(self.site_names())
            live = [site for site in self.site_names()
                    if not self.communicator.get_client_disconnect_time(site) and site not in redeploying]
            back = [site for site in sorted(gone) if site in live]
            if back and len(live) >= self.job.min_clients:
                return back, sorted(gone)
            time.sleep(1.0)
        return [], sorted(gone)

    def own_the_quorum(self) -> None:
        """Keep FLARE from ending the run when fewer live sites remain than the job's `min_clients` (its communicator's
        deployment-policy check): with `quorum_wait_s` the round waits for them itself and stops, naming each, only
        after the wait. FLARE 2.9 has no setting for this; the check is a method of the communicator's instance, so
        this replaces it for this run only (scheduling still waits for `min_clients` sites to start the job)."""
        if self.job.quorum_wait_s > 0:
            self.communicator._job_policy_violated = lambda: False

    # --- the hooks ------------------------------------------------------------------------------------------------

    @abstractmethod
    def setup(self) -> None:
        """Build the initial global state (the model, the layers it federates, ...)."""

    @abstractmethod
    def job_summary(self) -> dict[str, Any]:
        """The workflow's configuration: results.json's "job" and part of the checkpoint's digest."""

    @abstractmethod
    def round_message(self, round_index: int) -> RoundMessage:
        """What the round's training task sends (the base sends it, `send`)."""

    @abstractmethod
    def update_check(self, round_index: int) -> UpdateCheck:
        """The rule an update must meet this round before it may touch the global model."""

    @abstractmethod
    def aggregate(self, round_index: int, intake: RoundIntake, entry: dict[str, Any]) -> None:
        """Combine the round's valid updates into the global state; add the kind's fields to `entry`."""

    @abstractmethod
    def checkpoint_state(self) -> tuple[dict[str, Any], dict[str, Weights]]:
        """What a resume needs beyond the rounds: JSON state and named parameter sets."""

    @abstractmethod
    def restore(self, resumed: Resumed) -> None:
        """Take back what `checkpoint_state` saved."""

    @abstractmethod
    def model_to_save(self) -> Weights:
        """The model a stopped or failed run keeps as global_model.pt."""

    def secure_groups(self) -> list[list[str]]:
        """With `secure_aggregation`: the groups of parameter names averaged together (each over the sites that
        sent it), in the order the masked vector holds them; the default is one group, every parameter sent."""
        return [list(self.sent_params)]

    def masked_answer_check(self, round_index: int) -> MetaCheck | None:
        """With `secure_aggregation`: the rule for what a training answer sends in the clear besides its keys."""
        return None

    def before_rounds(self) -> None:
        """A fresh run's first step (not taken on a resume)."""

    def finish_run(self) -> bool:
        """After the last round: final tasks and the finished record; False when the run was stopped there."""
        self.recorder.save_model(self.model_to_save())
        self.recorder.finish("finished")
        return True

    # --- shared parts ---------------------------------------------------------------------------------------------

    def outcomes(self, intake: RoundIntake) -> dict[str, str]:
        """Each site's outcome this round; a silent site's says what the server heard about it."""
        failed = self.failed_sites()
        outcomes = {**site_outcomes(intake, failed), **self.quiet_outcomes(set(intake.no_result) - failed)}
        return dict(sorted(outcomes.items()))

    def stopped(self, where: str, results: list[FLModel] | None = None, round_index: int | None = None) -> None:
        """The run was aborted during `where`: by the admin ("aborted"), or by FLARE for too few live sites
        ("failed", naming each site's outcome and the round that could not complete)."""
        answered = {u.site for u in take_updates(results or [], self.site_names(), lambda u, m: None).updates}
        outcomes = dict(sorted({**{site: "update accepted" for site in answered},
                                **self.quiet_site_outcomes(answered)}.items()))
        status, reason = (self.stop_cause(where, outcomes, self.job.min_clients)
                          or ("aborted", f"aborted during {where}"))
        if status == "aborted":
            return self.stop(status, reason)
        if round_index is None:
            extra: dict[str, Any] = {"outcomes": outcomes}
        else:
            extra = {"failed_round": {"round": round_index + 1, "outcomes": outcomes}}
        self.stop(status, reason, **extra)

    def stop(self, status: str, reason: str, **extra: Any) -> None:
        """End early with the completed rounds and the last model kept; the checkpoint stays for a resume."""
        self.recorder.save_model(self.model_to_save())
        self.recorder.finish(status, error=reason, **extra)
        self.info(f"job {status}: {reason}; {len(self.recorder.record['rounds'])} completed rounds kept")

    def fail(self, reason: str, **extra: Any) -> None:
        """Stop as "failed" with the reason, and make FLARE end the job with it."""
        self.stop("failed", reason, **extra)
        self.panic(reason)
