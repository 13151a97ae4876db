"""The site's status as Prometheus metrics (`/metrics` of the site's page), made with the official client library
from the same snapshot the page shows, so that a dashboard and the page never disagree."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from site_agent.status.snapshot import SiteStatus

JOB_STATES = ("seen", "accepted", "refused", "running", "ended", "stopped")


class _SiteCollector(Collector):
    def __init__(self, status: SiteStatus):
        self.status = status

    def collect(self) -> Iterator[Metric]:
        """Every metric of the snapshot, made afresh per scrape (the audit log and ledger are the counters' state)."""
        s, c = self.status, self.status.connection
        yield InfoMetricFamily("site_agent", "the site and its agent", value={"site": s.site,
                                                                             "agent_version": s.agent_version})
        yield GaugeMetricFamily("site_agent_client_running", "1 while FLARE's client process for this kit runs",
                                value=int(c.client_pid is not None))
        yield GaugeMetricFamily("site_agent_server_reachable", "1 when the server answered the mutual-TLS probe",
                                value=int(c.server_status == "OK"))
        if c.rtt_ms is not None:
            yield GaugeMetricFamily("site_agent_server_probe_seconds", "seconds of the last mutual-TLS probe",
                                    value=c.rtt_ms / 1000)
        if c.certificate_days_left is not None:
            yield GaugeMetricFamily("site_agent_certificate_days_left", "days until the kit's certificate expires",
                                    value=c.certificate_days_left)
        states = GaugeMetricFamily("site_agent_jobs", "jobs the audit log names, by state", labels=["state"])
        for state in JOB_STATES:
            states.add_metric([state], sum(1 for j in s.jobs if j.state == state))
        yield states
        rounds = GaugeMetricFamily("site_agent_job_round", "round of the last task each running job sent here",
                                   labels=["job_id", "kind"])
        received = CounterMetricFamily("site_agent_tasks_received", "tasks that reached the site, per job",
                                       labels=["job_id", "kind"])
        sent = CounterMetricFamily("site_agent_results_sent", "task results that left the site, per job",
                                   labels=["job_id", "kind"])
        sent_bytes = CounterMetricFamily("site_agent_result_bytes", "bytes of the results that left, per job",
                                         labels=["job_id", "kind", "masked"])
        for job in s.jobs:
            labels = [job.job_id, job.kind]
            if job.state == "running" and job.round is not None:
                rounds.add_metric(labels, job.round)
            received.add_metric(labels, job.tasks_received)
            sent.add_metric(labels, job.results_sent)
            sent_bytes.add_metric([*labels, "yes" if job.masked else "no"], job.bytes_sent)
        yield from (rounds, received, sent, sent_bytes)
        refusals = CounterMetricFamily("site_agent_refusals", "refusals the audit log records, by event",
                                       labels=["event"])
        for event, count in s.refusals.items():
            refusals.add_metric([event], count)
        yield refusals
        b = s.budget
        yield GaugeMetricFamily("site_agent_epsilon_spent", "epsilon the ledger's jobs spent (basic composition)",
                                value=b.epsilon)
        yield GaugeMetricFamily("site_agent_delta_spent", "delta the ledger's jobs spent", value=b.delta)
        yield CounterMetricFamily("site_agent_jobs_charged", "jobs the privacy ledger records", value=b.jobs)
        if b.budget_epsilon is not None and b.budget_delta is not None:
            yield GaugeMetricFamily("site_agent_epsilon_budget", "the policy's epsilon budget", value=b.budget_epsilon)
            yield GaugeMetricFamily("site_agent_delta_budget", "the policy's delta budget", value=b.budget_delta)


def site_metrics(status: SiteStatus) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SiteCollector(status))
    return generate_latest(registry)
