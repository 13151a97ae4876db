"""PLayer-FL vs its baselines on synthetic ISIC-format sites with label skew, in FLARE's simulator
(methods x seeds -> report)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from federation_tools.simulate import simulate
from jobs.common import build_job, export
from jobs.playerfl.spec import KIND, PLayerFLParams
from server_app.report import load_runs, write_report
from server_app.results import RESULTS_FILE
from site_agent.data.synthetic_isic import write_isic_site

DEMO_METHODS = ("playerfl", "fedavg", "local")


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


def run_playerfl_demo(out_dir: Path, methods: Sequence[str] = DEMO_METHODS, seeds: Sequence[int] = (0,),
                      num_sites: int = 4, images_per_site: int = 40, image_size: int = 32, num_rounds: int = 3,
                      alpha: float = 0.5,
                      batch_size: int = 16, model_args: dict[str, Any] | None = None) -> Path:
    """Simulate every method for every seed on one synthetic federation and write the report; returns report.md."""
    out_dir = Path(out_dir)
    sites = write_demo_sites(out_dir / "data", num_sites, images_per_site, image_size, alpha, seed=0)
    results = [simulate_method(method, out_dir, sites, out_dir / "data", seed, num_rounds=num_rounds,
                               image_size=image_size, batch_size=batch_size, model_args=model_args)
               for seed in seeds for method in methods]
    return write_report(load_runs(results), out_dir / "report")
