"""What every job shares: a FedJob that ships no code and records the agent version it was built for."""

from __future__ import annotations

from pathlib import Path

from nvflare.job_config.api import FedJob

from site_agent import __version__ as AGENT_VERSION

AGENT_VERSION_KEY = "site_agent_version"
APP_PACKAGES = ["site_agent", "server_app"]


def new_job(name: str, min_clients: int) -> FedJob:
    """A FedJob whose components are referenced by import path from the installed packages (no `custom/`)."""
    job = FedJob(name=name, min_clients=min_clients, meta_props={AGENT_VERSION_KEY: AGENT_VERSION})
    job.set_app_packages(APP_PACKAGES)
    return job


def export(job: FedJob, out_dir: Path) -> Path:
    """Write the job folder an admin can `submit_job`; refuses to produce a job that would ship code."""
    out_dir = Path(out_dir)
    job.export_job(str(out_dir))
    job_dir = out_dir / job.name
    shipped = sorted(str(p.relative_to(job_dir)) for p in job_dir.rglob("custom") if p.is_dir())
    if shipped:
        raise RuntimeError(f"job {job.name} would ship code in {shipped}; sites refuse such jobs")
    return job_dir
