"""The federation's status as Prometheus metrics (`/metrics` of the study lead's page), made with the official client
library from the snapshot the page shows."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from federation_tools.status.snapshot import StudyStatus


class _StudyCollector(Collector):
    def __init__(self, status: StudyStatus):
        self.status = status

    def collect(self) -> Iterator[Metric]:
        """Every metric of the snapshot, made afresh per scrape from what the server answered."""
        s = self.status
        yield GaugeMetricFamily("federation_server_reachable", "1 when the server answered the admin session",
                                value=int(not s.problem))
        connected = GaugeMetricFamily("federation_site_connected", "1 while the site's heartbeat is recent",
                                      labels=["site"])
        for site in s.sites:
            connected.add_metric([site.name], int(site.connected))
        yield connected
        states: dict[str, int] = {}
        for job in s.jobs:
            states[job.status] = states.get(job.status, 0) + 1
        jobs = GaugeMetricFamily("federation_jobs", "jobs the server lists (the latest ones), by status",
                                 labels=["status"])
        for status, count in sorted(states.items()):
            jobs.add_metric([status], count)
        yield jobs
        rounds = CounterMetricFamily("federation_job_rounds_completed", "completed rounds of each running job",
                                     labels=["job_id", "kind"])
        total = GaugeMetricFamily("federation_job_rounds", "rounds each running job has", labels=["job_id", "kind"])
        eta = GaugeMetricFamily("federation_job_eta_seconds", "estimated seconds until each running job ends",
                                labels=["job_id", "kind"])
        sent = CounterMetricFamily("federation_site_transfer_bytes", "bytes each site's link carried in a running "
                                   "job's completed rounds", labels=["job_id", "site"])
        seconds = CounterMetricFamily("federation_site_transfer_seconds", "seconds those transfers took on each "
                                      "site's link", labels=["job_id", "site"])
        for job in s.jobs:
            if job.progress is None:
                continue
            labels = [job.job_id, job.kind]
            rounds.add_metric(labels, job.progress.completed_rounds)
            total.add_metric(labels, job.progress.num_rounds)
            if job.progress.eta_s is not None:
                eta.add_metric(labels, job.progress.eta_s)
            for name, per_round in job.progress.bytes.items():
                sent.add_metric([job.job_id, name], sum(per_round))
            for name, per_round_s in job.progress.link_seconds.items():
                seconds.add_metric([job.job_id, name], sum(per_round_s))
        yield from (rounds, total, eta, sent, seconds)


def study_metrics(status: StudyStatus) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StudyCollector(status))
    return generate_latest(registry)
