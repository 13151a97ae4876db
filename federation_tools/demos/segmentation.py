"""The segmentation job in `fl-demo`: 4 synthetic 32^3 glioma cases per site, a tiny SegResNet, 3 rounds on CPU."""

from __future__ import annotations

import json
from pathlib import Path

from federation_tools.admin import JobOutcome
from federation_tools.demo_job import DemoJob
from jobs.segmentation.spec import CPU_DEMO, CPU_DEMO_DATA, KIND, SegmentationParams
from reports.segmentation import markdown
from server_app.results import RESULTS_FILE
from site_agent.data.demo.synthetic_brats import write_brats_site


def site_data(index: int, site: str, root: Path) -> dict[str, str]:
    folder = root / site / "brats"
    write_brats_site(folder, index, **CPU_DEMO_DATA)
    return {"brats": str(folder)}


def summary(outcome: JobOutcome) -> str:
    results = json.loads((outcome.server_app_dir() / RESULTS_FILE).read_text())
    final = results["final_validation"]["selection"]["value"]
    return (markdown(results)
            + f"\nfinal global model: validation Dice {final:.3f} (site-weighted mean of TC, WT, ET); "
            f"plot it with: fl-seg-report {outcome.result_dir} --out report/")


DEMOS = [DemoJob("brats-segmentation", KIND.name,
                 SegmentationParams(num_rounds=3, local_epochs=2, min_clients=3, **CPU_DEMO), site_data, summary)]
