"""What a server workflow knows about its sites beyond their answers, and how it tells FLARE's stop from an admin's.

FLARE tells a job's workflow that a site is gone but not why, and ends the run itself when fewer live sites remain
than the job's `min_clients`, through the same abort signal an admin's `abort_job` raises. Every workflow base here
(`SiteAwareController`) therefore remembers FLARE's fatal-error event (it precedes FLARE's abort), reads what the
server's main process heard about each site (`server_app.site_events`: a job process that failed and how, a client
that stopped answering, a client that came back) and FLARE's own verdict of who is disconnected, so that every stop
names each site and what happened to it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nvflare.apis.event_type import EventType
from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.fl_context import FLContext
from nvflare.app_common.workflows.model_controller import ModelController
from nvflare.widgets.info_collector import GroupInfoCollector, InfoCollector

from server_app.progress import PROGRESS_STATS
from server_app.rejoin import accept_returning_sites
from server_app.site_events import REJOINED, RETURNED, describe, last_event_by_site, latest_of_kind

LATE_SITE_WAIT_S = 600
"""Seconds a task waits for the other sites once `min_clients` answered (a site FLARE deems dead ends it sooner)."""
NO_REASON_HEARD = "no reason heard (the site's client or job process stopped, or it was too late)"
REJOIN_WAIT_S = 120.0
"""How long a one-task workflow waits for the server to deploy its job again to a site that registered again."""


class SiteAwareController(ModelController):
    """A ModelController that can say, at any point of its run, why a site went quiet and who stopped the run."""

    def __init__(self, **controller_options: Any) -> None:
        super().__init__(persistor_id="", **controller_options)
        self._flare_stop_reason = ""
        self._started_at = time.time()

    def start_controller(self, fl_ctx: FLContext) -> None:
        """FLARE's start, then accept returning sites: the main process deploys the job to a site whose client
        registered again and has this process take its new token (`server_app.rejoin`)."""
        super().start_controller(fl_ctx)
        accept_returning_sites(self.engine)

    def site_names(self) -> list[str]:
        return [client.name for client in self.engine.get_clients()]

    def failed_sites(self) -> set[str]:
        """Sites whose task returned an error in the last task. FLARE's ModelController keeps them for its own error
        tolerance and offers no public accessor, so this is the one place that reads its attribute."""
        return set(getattr(self, "_current_failed_clients", set()))

    def site_reasons(self) -> dict[str, str]:
        """What the server knows of each site that went quiet during this job: the main process's events, else
        FLARE's own verdict that it is disconnected."""
        run_dir = Path(self.get_app_dir()).parent
        reasons = {site: describe(event) for site, event in last_event_by_site(run_dir, self._started_at).items()}
        for site in self.site_names():
            gone_since = self.communicator.get_client_disconnect_time(site)
            if gone_since and site not in reasons:
                reasons[site] = f"FLARE deems it disconnected since {time.ctime(gone_since)}"
        return reasons

    def rejoined_sites(self, missing: Iterable[str], timeout: float = REJOIN_WAIT_S) -> list[str]:
        """The `missing` sites whose client registered again during this job and whose job the server's main process
        has started there again (`server_app.rejoin`), waiting up to `timeout` for the deploys still under way: a
        one-task workflow sends them its task again, a round workflow its next round (a restarted site's warm
        process can take most of a minute to start its job on a loaded machine, longer than a short job's
        remaining rounds). Each is taken off FLARE's dead-site watch list first (FLARE's own `client_is_active`):
        FLARE takes it off only at the new job process's first request, and a task sent before that request would
        be ended at once as sent to a dead site."""
        missing, run_dir = sorted(missing), Path(self.get_app_dir()).parent
        deadline = time.monotonic() + timeout
        told = False
        while True:
            events = last_event_by_site(run_dir, self._started_at)
            kinds = {site: events[site].kind for site in missing if site in events}
            if RETURNED in kinds.values() and not told:
                told = True
                under_way = sorted(site for site, kind in kinds.items() if kind == RETURNED)
                self.info(f"waiting up to {timeout:.0f} s for {', '.join(under_way)} to be deployed the job again")
            if RETURNED not in kinds.values() or time.monotonic() >= deadline or self.abort_signal.triggered:
                back = [site for site, kind in kinds.items() if kind == REJOINED]
                for site in back:
                    self.communicator.client_is_active(site, "its job was started there again", self.fl_ctx)
                return back
            time.sleep(1.0)

    def sites_being_redeployed(self, sites: Iterable[str]) -> set[str]:
        """The `sites` whose client registered again during this job and whose job the server's main process is
        deploying to them again right now (`server_app.rejoin`): gone from the job, but on their way back. FLARE
        may take such a site off its dead-site watch list before its job process runs there (when the job's server
        process takes the site's new token), so a workflow asks this rather than FLARE whether to wait for it."""
        return latest_of_kind(Path(self.get_app_dir()).parent, sites, RETURNED, self._started_at)

    def sites_rejoined_since(self, sites: Iterable[str], since: float) -> set[str]:
        """The `sites` whose job the server's main process started again at or after `since` (wall clock): back in
        the job, though a task sent before then never reached their new job process."""
        return latest_of_kind(Path(self.get_app_dir()).parent, sites, REJOINED, max(since, self._started_at))

    def stop_cause(self, where: str, outcomes: dict[str, str], min_clients: int) -> tuple[str, str] | None:
        """Whether the run is being stopped, and by whom, in the words results.json records: None while it goes on;
        ("failed", FLARE's reason, naming each site's `outcomes`) when FLARE itself ends it (too few live sites,
        ...); ("aborted", "aborted during <where>") for an admin's abort. The one place a workflow tells the two
        apart: both reach it through the same abort signal."""
        if not self.abort_signal.triggered:
            return None
        if self._flare_stop_reason:
            return "failed", (f"FLARE ended the run during {where} ({self._flare_stop_reason}): the job needs "
                              f"{min_clients} sites; {in_words(outcomes)}")
        return "aborted", f"aborted during {where}"

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        """Remember why FLARE ends the run (its fatal-error event precedes the abort), to tell it from an admin's;
        answer the admin's `show_stats` with the run's `progress`."""
        if event_type == EventType.FATAL_SYSTEM_ERROR and not self._flare_stop_reason:
            self._flare_stop_reason = str(fl_ctx.get_prop(FLContextKey.EVENT_DATA, "") or "fatal error")
        elif event_type == InfoCollector.EVENT_TYPE_GET_STATS:
            collector = fl_ctx.get_prop(InfoCollector.CTX_KEY_STATS_COLLECTOR)
            progress = self.progress()
            if isinstance(collector, GroupInfoCollector) and progress:
                collector.add_info(group_name=PROGRESS_STATS, info=progress)
        super().handle_event(event_type, fl_ctx)

    def progress(self) -> dict[str, Any]:
        """What `show_stats JOB server` says of this run (server_app.progress); nothing unless the workflow says."""
        return {}

    def quiet_outcomes(self, quiet: Iterable[str]) -> dict[str, str]:
        """Each of the `quiet` sites (they did not answer) with what the server heard about it: the one wording of a
        quiet site's outcome, in a round's outcomes and in every stop."""
        reasons = self.site_reasons()
        return {site: f"no answer: {reasons.get(site, NO_REASON_HEARD)}" for site in sorted(quiet)}

    def quiet_site_outcomes(self, answered: set[str]) -> dict[str, str]:
        """Each site that did not answer, with what the server heard about it."""
        return self.quiet_outcomes(set(self.site_names()) - answered)


def in_words(outcomes: dict[str, str]) -> str:
    return "; ".join(f"{site}: {outcome}" for site, outcome in outcomes.items())
