"""The site's status as Prometheus metrics (`/metrics` of the site's page), made with the official client library
from the same snapshot the page shows, so that a dashboard and the page never disagree. Every metric carries the
site's name as its `site` label (docs/grafana-dashboard.json filters on it)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from site_agent.status.snapshot import SiteStatus

JOB_STATES = ("seen", "accepted", "refused", "running", "ended", "stopped")


class _SiteCollector(Collector):
    def __init__(self, status: SiteStatus):
        self.status = status

    def _one(self, kind: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str, documentation: str,
             value: float) -> Metric:
        family = kind(name, documentation, labels=["site"])
        family.add_metric([self.status.site], value)
        return family

    def _many(self, kind: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str, documentation: str,
              labels: Sequence[str], rows: Sequence[tuple[Sequence[str], float]]) -> Metric:
        family = kind(name, documentation, labels=["site", *labels])
        for values, value in rows:
            family.add_metric([self.status.site, *values], value)
        return family

    def collect(self) -> Iterator[Metric]:
        """Every metric of the snapshot, made afresh per scrape (the audit log and ledger are the counters' state)."""
        s, c, b = self.status, self.status.connection, self.status.budget
        gauge, counter = GaugeMetricFamily, CounterMetricFamily
        yield InfoMetricFamily("site_agent", "the site and its agent",
                               value={"site": s.site, "agent_version": s.agent_version})
        yield self._one(gauge, "site_agent_client_running", "1 while FLARE's client process for this kit runs",
                        int(c.client_pid is not None))
        yield self._one(gauge, "site_agent_server_reachable", "1 when the server answered the mutual-TLS probe",
                        int(c.server_status == "OK"))
        yield self._many(gauge, "site_agent_server_probe_seconds", "seconds of the last mutual-TLS probe (none: "
                         "the server did not answer)", [], [([], c.rtt_ms / 1000)] if c.rtt_ms is not None else [])
        yield self._many(gauge, "site_agent_certificate_days_left", "days until the kit's certificate expires", [],
                         [([], c.certificate_days_left)] if c.certificate_days_left is not None else [])
        yield self._many(gauge, "site_agent_jobs", "jobs the audit log names, by state", ["state"],
                         [([state], sum(1 for j in s.jobs if j.state == state)) for state in JOB_STATES])
        per_job = ["job_id", "kind"]
        running = [j for j in s.jobs if j.state == "running" and j.round is not None]
        yield self._many(gauge, "site_agent_job_round", "round of the last task each running job sent here", per_job,
                         [([j.job_id, j.kind], j.round or 0) for j in running])
        yield self._many(counter, "site_agent_tasks_received", "tasks that reached the site, per job", per_job,
                         [([j.job_id, j.kind], j.tasks_received) for j in s.jobs])
        yield self._many(counter, "site_agent_results_sent", "task results that left the site, per job", per_job,
                         [([j.job_id, j.kind], j.results_sent) for j in s.jobs])
        yield self._many(counter, "site_agent_result_bytes", "bytes of the results that left, per job",
                         [*per_job, "masked"],
                         [([j.job_id, j.kind, "yes" if j.masked else "no"], j.bytes_sent) for j in s.jobs])
        yield self._many(counter, "site_agent_refusals", "refusals the audit log records, by event", ["event"],
                         [([event], count) for event, count in s.refusals.items()])
        yield self._one(gauge, "site_agent_epsilon_spent", "epsilon the ledger's jobs spent (basic composition)",
                        b.epsilon)
        yield self._one(gauge, "site_agent_delta_spent", "delta the ledger's jobs spent", b.delta)
        yield self._one(counter, "site_agent_jobs_charged", "jobs the privacy ledger records", b.jobs)
        if b.budget_epsilon is not None and b.budget_delta is not None:
            yield self._one(gauge, "site_agent_epsilon_budget", "the policy's epsilon budget", b.budget_epsilon)
            yield self._one(gauge, "site_agent_delta_budget", "the policy's delta budget", b.budget_delta)


def site_metrics(status: SiteStatus) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SiteCollector(status))
    return generate_latest(registry)
