"""Each row of an ISIC site's ground-truth CSV as a data summary counts it, through the agent's own scan and image
reader (`site_agent.data.isic`): its class, the image's stored size and brightness, its mean colour; a row a
training job with the summary's classes would not use is counted under its reason."""

from __future__ import annotations

from pathlib import Path

from fl_contract import data_summary as ds
from fl_contract.job_params import DataSummaryParams
from site_agent.data.isic import IsicImageReader, scan_isic_site
from site_agent.data.readers.reader import DataError
from site_agent.summary.observation import Observation


def observe_site(folder: Path, job: DataSummaryParams) -> list[Observation]:
    """Every CSV row: the scan's problem rows and rows of other classes under their reasons, then every usable row's
    image decoded once."""
    scan = scan_isic_site(Path(folder), job.classes)
    seen: list[Observation] = []
    for problem in scan.problems:
        seen.append(_unused(problem.image, _row_reason(problem.reason), f"{scan.csv}, line {problem.line}: "
                                                                        f"{problem.reason}"))
    for diagnosis, count in sorted(scan.other_classes.items()):
        seen += [_unused(f"{diagnosis} row", "class not in the job's classes", "") for _ in range(count)]
    reader = IsicImageReader()
    for record in scan.records:
        try:
            image = reader.read(record.path)
        except DataError as err:
            seen.append(_unused(record.image, _image_reason(str(err)), str(err)))
            continue
        rgb = image.array / 255.0
        height, width = image.spatial_shape
        item = Observation(record.image)
        item.cells.update({"case_status": ds.USABLE, "class": record.diagnosis,
                           "image_width": ds.bin_of(width, ds.IMAGE_SIDE_EDGES, "px"),
                           "image_height": ds.bin_of(height, ds.IMAGE_SIDE_EDGES, "px"),
                           "brightness": ds.bin_of(float(rgb.mean()), ds.BRIGHTNESS_EDGES, "")})
        item.values.update({f"colour/{c}": float(rgb[i].mean()) for i, c in enumerate("RGB")})
        seen.append(item)
    return seen


def _unused(name: str, reason: str, problem: str) -> Observation:
    item = Observation(name, {"class": ds.NA, "image_width": ds.NA, "image_height": ds.NA, "brightness": ds.NA})
    item.refuse(reason, problem)
    return item


def _row_reason(reason: str) -> str:
    """The scan's reasons (site_agent.data.isic.scan_isic_site) as the summary's fixed cells."""
    if reason.startswith("listed twice"):
        return "listed twice"
    if reason.startswith("image missing"):
        return "image missing"
    return "no or several labels"


def _image_reason(message: str) -> str:
    """The image reader's refusals (site_agent.data.isic.IsicImageReader) as the summary's fixed cells."""
    return "image too small or too large" if "too large" in message or "pixels a side" in message \
        else "image does not decode"
