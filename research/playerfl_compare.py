"""PLayer-FL and its baselines on synthetic ISIC-format sites with label skew: the sites, and one method's run in
FLARE's simulator (the report compares such runs: `reports.playerfl`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from federation_tools.simulate import simulate
from jobs.common import build_job, export
from jobs.playerfl.spec import KIND, PLayerFLParams
from server_app.results import RESULTS_FILE
from site_agent.data.demo.synthetic_isic import write_isic_site


def write_demo_sites(data_dir: Path, num_sites: int, images_per_site: int, image_size: int, alpha: float,
                     seed: int) -> list[str]:
    """Synthetic four-class sites `site-1..N` under `data_dir` (label skew from one Dirichlet(alpha) draw)."""
    sites = [f"site-{i}" for i in range(1, num_sites + 1)]
    for index, site in enumerate(sites, start=1):
        write_isic_site(Path(data_dir) / site, index, n_sites=num_sites, n_images=images_per_site, alpha=alpha,
                        size=image_size, seed=seed)
    return sites


def simulate_method(method: str, out_dir: Path, sites: list[str], data_dir: Path, seed: int, **job_args: Any) -> Path:
    """Export and simulate one method; returns its results.json, or raises naming the log if the job aborted."""
    name = f"{method}-seed{seed}"
    params = PLayerFLParams(method=method, seed=seed, min_clients=len(sites), **job_args)
    job_dir = export(build_job(KIND, params), Path(out_dir) / "jobs" / name)
    datasets = {"isic": str(Path(data_dir).resolve() / "{site_name}")}
    run = simulate(job_dir, Path(out_dir) / "runs" / name, sites, datasets)
    results = run.server_app_dir / RESULTS_FILE
    if run.aborted() or not results.is_file():
        raise RuntimeError(f"{method} (seed {seed}) did not finish; see {run.server_log}")
    return results
