"""What a data-summary job's sites send and how the server reads it: the features each case or image is counted in,
their fixed cells, the summary's JSON layout, and the checks an admin acts on (flags).

Every released number is a count of cases (images, for ISIC) in one cell of one feature, or a quantile over at least
the site's `min_count` cases. Each case lands in exactly one cell of every feature of its data kind ("n/a",
"missing", "not DICOM" are cells too), so one case changes each feature's counts by one: the L2 sensitivity of all
counts together is the square root of the number of features, which is what the site's DP noise is scaled to.
A feature's cells are fixed here (histogram bins, vendor names, label conventions), so which cells exist never
depends on a site's data, except for `OPEN_FEATURES` (scanner model names), which are never released under DP.
Torch-free: the server, `fl-job export` and the report read it.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fl_contract.labels import LABEL_MAPS, REGIONS

FORMAT = "hospital-fl-data-summary/v1"
SUMMARY_TASK = "summarize"
SUMMARY_META = "data_summary"
"""The one array of the site's answer: the summary's JSON text as UTF-8 bytes (uint8), the exact bytes the privacy
officer's export holds (`site-agent summary export`)."""
GLIOMA, ISIC = "glioma", "isic"
DATA_KINDS = (GLIOMA, ISIC)

MODALITIES = ("t1", "t1ce", "t2", "flair")
"""The glioma modalities, in the channel order training stacks them (site_agent.data.brats_case.MODALITIES)."""
AXES = ("x", "y", "z")
NA = "n/a"
NOT_DICOM = "not DICOM"
NOT_RECORDED = "not recorded"
USABLE = "usable"


@dataclass(frozen=True)
class Feature:
    """One thing every case is counted by: its name in the summary, its cells (None: names found in the data) and
    what it means, for the report and the privacy officer's text."""

    name: str
    cells: tuple[str, ...] | None
    meaning: str


def bins(edges: Sequence[float], unit: str, low: float = 0.0) -> tuple[str, ...]:
    """The cells of a histogram on `edges` (each bin holds values from its lower edge up to, not including, the next):
    "< e0 unit", "e0-e1 unit", ..., ">= eN unit"."""
    labels = [f"< {_num(edges[0])}", *(f"{_num(a)}-{_num(b)}" for a, b in itertools.pairwise(edges)),
              f">= {_num(edges[-1])}"]
    return tuple(f"{label} {unit}".rstrip() for label in labels)


def bin_of(value: float, edges: Sequence[float], unit: str) -> str:
    """The cell of `bins(edges, unit)` that holds `value`."""
    index = sum(value >= e for e in edges)
    return bins(edges, unit)[index]


def _num(value: float) -> str:
    return f"{value:g}"


SPACING_EDGES = (0.5, 0.8, 0.95, 1.05, 1.25, 1.75, 2.5, 3.5, 5.0)
SHAPE_EDGES = (32, 64, 96, 128, 160, 192, 224, 256, 320, 384, 512)
THICKNESS_EDGES = (1.05, 1.55, 2.05, 3.05, 5.05)
FIELD_EDGES = (1.0, 1.25, 2.0, 3.5)
LOG_INTENSITY_EDGES = tuple(x / 2 for x in range(0, 11))
"""log10 of a case's 99th-percentile brain intensity in half decades: bins 3 apart differ by at least 10 times."""
TUMOUR_ML_EDGES = (1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0)
IMAGE_SIDE_EDGES = (64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 4096)
BRIGHTNESS_EDGES = tuple(x / 10 for x in range(1, 10))
VENDORS = ("Siemens", "GE", "Philips", "Canon/Toshiba", "Hitachi/Fujifilm", "United Imaging", "other")
"""Scanner vendors as headers spell them in many ways ("SIEMENS", "GE MEDICAL SYSTEMS", "Philips Healthcare")."""
TRANSFER_SYNTAXES = ("Explicit VR Little Endian", "Implicit VR Little Endian", "Explicit VR Big Endian",
                     "Deflated", "JPEG Baseline", "JPEG Lossless", "JPEG-LS", "JPEG 2000", "RLE Lossless", "other")
ORIENTATIONS = tuple("".join(p) for letters in itertools.product("LR", "AP", "SI")
                     for p in itertools.permutations(letters))
"""The 48 axis codes a voxel grid can have (nibabel's aff2axcodes): RAS, LPS, ASL, ..."""
LABEL_FITS = ("brats2021 only", "brats2023 only", "either (no enhancing voxel)", "no known map", "no label", NA)
TUMOUR_VALUES = (1, 2, 3, 4)
LABEL_CLASS_SETS = tuple(",".join(str(v) for v in subset) or "0 only (empty)" for n in range(len(TUMOUR_VALUES) + 1)
                         for subset in itertools.combinations(TUMOUR_VALUES, n))
"""The tumour label values a case's label map holds besides 0: "1,2,4", "1,2,3", "0 only (empty)", ..."""
GLIOMA_REFUSALS = (USABLE, *(f"missing {m}" for m in MODALITIES), *(f"unreadable {m}" for m in MODALITIES),
                   "missing label", "unreadable label", "series off the reference grid",
                   "label not usable with the job's label_map")
"""Why a training job with the summary's parameters would refuse a case (or "usable"): reasons, never file names."""
ISIC_REFUSALS = (USABLE, "image missing", "image does not decode", "image too small or too large",
                 "no or several labels", "listed twice", "class not in the job's classes")


def glioma_features() -> tuple[Feature, ...]:
    """A glioma case's features, in the order the summary and the report list them: what a training job would do with
    it, its series, grid, scanner, intensities and label map."""
    features = [Feature("case_status", GLIOMA_REFUSALS, "what a training job with these parameters does with the case")]
    features += [Feature(f"modality/{m}", ("present", "missing", "unreadable"), f"the case's {m} series")
                 for m in MODALITIES]
    features += [Feature(f"spacing_mm/{a}", (*bins(SPACING_EDGES, "mm"), NA), f"voxel size along {a}")
                 for a in AXES]
    features += [Feature(f"shape/{a}", (*bins(SHAPE_EDGES, "voxels"), NA), f"volume size along {a}") for a in AXES]
    features += [
        Feature("orientation", (*ORIENTATIONS, NA), "the voxel axes' directions (nibabel axis codes)"),
        Feature("roi_fit", ("fits roi_size", "smaller than roi_size", NA),
                "whether the volume, as the network sees it, is at least the planned training crop on every axis"),
        Feature("manufacturer", (*VENDORS, NOT_RECORDED, NOT_DICOM), "scanner vendor (DICOM Manufacturer)"),
        Feature("model", None, "scanner model (DICOM ManufacturerModelName); not released under DP"),
        Feature("field_strength", (*bins(FIELD_EDGES, "T"), NOT_RECORDED, NOT_DICOM),
                "magnetic field strength (DICOM MagneticFieldStrength)"),
        Feature("slice_thickness_mm", (*bins(THICKNESS_EDGES, "mm"), NOT_RECORDED, NOT_DICOM),
                "DICOM SliceThickness"),
        Feature("transfer_syntax", (*TRANSFER_SYNTAXES, NOT_DICOM), "how the pixel data are encoded"),
    ]
    features += [Feature(f"intensity_p99/{m}", (*bins(LOG_INTENSITY_EDGES, "log10"), NA),
                         f"log10 of the 99th percentile of the {m} series' brain (non-zero) voxels, as stored")
                 for m in MODALITIES]
    features += [
        Feature("label_map_fit", LABEL_FITS, "which BraTS label conventions the label values fit"),
        Feature("label_classes", (*LABEL_CLASS_SETS, "other values", "no label", NA),
                "the label values present besides 0"),
    ]
    features += [Feature(f"tumour_ml/{r}", ("0 mL", *bins(TUMOUR_ML_EDGES, "mL"), "no label", NA),
                         f"{r} volume in millilitres (\"< 1 mL\": above 0)") for r in REGIONS]
    return tuple(features)


def tumour_cell(millilitres: float) -> str:
    if millilitres == 0:
        return "0 mL"
    return bin_of(millilitres, TUMOUR_ML_EDGES, "mL")


def isic_features(classes: Sequence[str]) -> tuple[Feature, ...]:
    return (
        Feature("case_status", ISIC_REFUSALS, "what a training job with these classes does with the CSV row"),
        Feature("class", (*classes, NA), "the image's diagnosis"),
        Feature("image_width", (*bins(IMAGE_SIDE_EDGES, "px"), NA), "image width as stored"),
        Feature("image_height", (*bins(IMAGE_SIDE_EDGES, "px"), NA), "image height as stored"),
        Feature("brightness", (*bins(BRIGHTNESS_EDGES, ""), NA), "mean of the image's RGB values, 0-1"),
    )


def features_of(data: str, classes: Sequence[str]) -> tuple[Feature, ...]:
    return glioma_features() if data == GLIOMA else isic_features(classes)


OPEN_FEATURES = frozenset(f.name for f in glioma_features() if f.cells is None)
VOXEL_QUANTILES = (1, 5, 25, 50, 75, 95, 99)
"""Percentiles of each case's brain voxels; the site sends their mean over its cases."""
CASE_QUANTILES = (5, 25, 50, 75, 95)
"""Percentiles over cases of a per-case value (tumour volume, an image's mean colour)."""


def quantile_names(data: str) -> dict[str, tuple[int, ...]]:
    """Every quantile entry of a summary and its percentiles."""
    if data == GLIOMA:
        names = {f"intensity/{m}": VOXEL_QUANTILES for m in MODALITIES}
        names |= {f"raw_intensity/{m}": VOXEL_QUANTILES for m in MODALITIES}
        return names | {f"tumour_ml/{r}": CASE_QUANTILES for r in REGIONS}
    return {f"colour/{c}": CASE_QUANTILES for c in "RGB"}


def dumps(summary: Mapping[str, Any]) -> str:
    """The summary's one JSON text: what the site sends, what its export holds, byte for byte."""
    return json.dumps(summary, indent=1, sort_keys=True) + "\n"


def rounded(value: float) -> float:
    """A quantile as released: 4 significant digits (enough to compare sites, not to identify a voxel)."""
    return float(f"{value:.4g}")


# --- the study's view: the sites' summaries pooled and compared -------------------------------------------------


def released_cells(summary: Mapping[str, Any], feature: str) -> dict[str, int]:
    entry = summary.get("features", {}).get(feature, {})
    return dict(entry.get("cells", {}))


def cases_released(summary: Mapping[str, Any]) -> int:
    return sum(released_cells(summary, "case_status").values())


def modal_cell(summary: Mapping[str, Any], feature: str, skip: Iterable[str] = (NA,)) -> str | None:
    cells = {c: n for c, n in released_cells(summary, feature).items() if c not in set(skip)}
    return max(sorted(cells), key=lambda c: cells[c]) if cells else None


def pooled(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The federation's view: per feature the sum of the cells the sites released (a cell a site withheld adds
    nothing), per quantile the case-weighted mean of the sites' means where every site released it."""
    features: dict[str, dict[str, int]] = {}
    for summary in summaries.values():
        for name, entry in summary.get("features", {}).items():
            for cell, count in entry.get("cells", {}).items():
                features.setdefault(name, {})
                features[name][cell] = features[name].get(cell, 0) + count
    quantiles: dict[str, Any] = {}
    names = {n for s in summaries.values() for n in s.get("quantiles", {})}
    for name in sorted(names):
        entries = [s["quantiles"][name] for s in summaries.values() if "values" in s.get("quantiles", {}).get(name, {})]
        if not entries or any(e["at"] != entries[0]["at"] for e in entries):
            continue
        total = sum(e["cases"] for e in entries)
        values = [rounded(sum(e["cases"] * e["values"][i] for e in entries) / total)
                  for i in range(len(entries[0]["at"]))]
        quantiles[name] = {"at": entries[0]["at"], "cases": total, "values": values, "sites": len(entries)}
    return {"features": {n: {"cells": c} for n, c in sorted(features.items())}, "quantiles": quantiles}


@dataclass(frozen=True)
class Flag:
    """Something an admin acts on before training: which site, what, and what to do."""

    site: str
    check: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"site": self.site, "check": self.check, "message": self.message}


def flags(summaries: Mapping[str, Mapping[str, Any]], plan: Mapping[str, Any]) -> list[Flag]:
    """What stands between these sites and a training job with the plan's parameters (`label_map`, `roi_size`,
    `classes`, ...: a data-summary job's or a training job's), from what the sites released."""
    if not summaries:
        return []
    data = next(iter(summaries.values())).get("data")
    found: list[Flag] = []
    for site, summary in sorted(summaries.items()):
        found += _refusals(site, summary)
        found += _glioma_site(site, summary, plan) if data == GLIOMA else _isic_site(site, summary, plan)
    if data == GLIOMA:
        for feature, what, fix in (*((f"spacing_mm/{a}", f"voxel size along {a}", "resample_ras_1mm") for a in AXES),
                                   ("orientation", "orientation", "resample_ras_1mm")):
            found += _unlike_others(summaries, feature, what, fix)
        found += _intensity_scale(summaries)
    return found


def _refusals(site: str, summary: Mapping[str, Any]) -> list[Flag]:
    cells = released_cells(summary, "case_status")
    if cases_released(summary) == 0:
        return [Flag(site, "cases", f"{site} released no case count: fewer than its min_count "
                                    f"({summary.get('min_count')}) cases, or none usable")]
    return [Flag(site, "refused", f"{site}: {n} cases a training job would refuse ({reason})")
            for reason, n in sorted(cells.items()) if reason != USABLE]


def _glioma_site(site: str, summary: Mapping[str, Any], plan: Mapping[str, Any]) -> list[Flag]:
    """One glioma site against the plan: modalities a training job needs, the label convention it reads, its crop."""
    out = []
    total = cases_released(summary)
    for m in MODALITIES:
        cells = released_cells(summary, f"modality/{m}")
        absent = cells.get("missing", 0) + cells.get("unreadable", 0)
        if absent or (total and cells.get("present", 0) < total):
            out.append(Flag(site, "modality", f"{site}: {m} missing or unreadable in "
                                              f"{absent or 'some'} cases; brats-segmentation needs all four "
                                              f"modalities ({', '.join(MODALITIES)})"))
    label_map = str(plan.get("label_map", ""))
    fits = released_cells(summary, "label_map_fit")
    for other in LABEL_MAPS:
        if other != label_map and fits.get(f"{other} only"):
            out.append(Flag(site, "label_map", f"{site}: {fits[f'{other} only']} cases are labelled in the {other} "
                                               f"convention, the job reads {label_map}; relabel them or run the job "
                                               f"with label_map={other}"))
    if fits.get("no known map"):
        out.append(Flag(site, "label_map", f"{site}: {fits['no known map']} label maps fit no BraTS convention"))
    roi = list(plan.get("roi_size", ()))
    if roi and roi == list(summary.get("params", {}).get("roi_size", ())):
        small = released_cells(summary, "roi_fit").get("smaller than roi_size", 0)
    else:  # another crop than the summary's: the shape bins that lie wholly below it
        small = max([_below(summary, a, size) for a, size in zip(AXES, roi)] or [0])
    if small:
        out.append(Flag(site, "roi", f"{site}: {small} volumes are smaller than roi_size {roi} on some axis; "
                                     "training pads them, or lower roi_size"))
    return out


def _below(summary: Mapping[str, Any], axis: str, size: int) -> int:
    """Cases whose shape bin along `axis` ends at or below `size` voxels."""
    edges = (*SHAPE_EDGES, math.inf)
    cells = bins(SHAPE_EDGES, "voxels")
    return sum(n for cell, n in released_cells(summary, f"shape/{axis}").items()
               if cell in cells and edges[cells.index(cell)] <= size)


def plan_warnings(results: Mapping[str, Any], plan: Mapping[str, Any]) -> list[str]:
    """What a data-summary job's results.json says against a job with parameters `plan` (its JSON): the flags
    recomputed for that job's label map, crop and classes, and a summary of another dataset key."""
    summaries: Mapping[str, Mapping[str, Any]] = results.get("sites", {})
    if (results.get("job") or {}).get("workflow") != "data summary" or not summaries:
        return ["the file is not a data-summary job's results.json with sites' summaries: nothing checked"]
    warnings = []
    summarised = next(iter(summaries.values())).get("params", {}).get("dataset")
    if plan.get("dataset") and summarised and plan["dataset"] != summarised:
        warnings.append(f"the summary describes dataset key {summarised!r}; this job reads {plan['dataset']!r}")
    return warnings + [f.message for f in flags(summaries, plan)]


def _isic_site(site: str, summary: Mapping[str, Any], plan: Mapping[str, Any]) -> list[Flag]:
    cells = released_cells(summary, "class")
    return [Flag(site, "class", f"{site}: class {c} absent or below its min_count ({summary.get('min_count')}) "
                                "images")
            for c in plan.get("classes", ()) if not cells.get(c)]


def _unlike_others(summaries: Mapping[str, Mapping[str, Any]], feature: str, what: str, fix: str) -> list[Flag]:
    """Sites whose most common cell differs from the one most sites share (or every site, with no majority)."""
    modes = {site: modal_cell(s, feature) for site, s in summaries.items()}
    known = {site: m for site, m in modes.items() if m is not None}
    if len(set(known.values())) < 2:
        return []
    tally = {m: list(known.values()).count(m) for m in set(known.values())}
    top = max(tally.values())
    majority = [m for m, n in tally.items() if n == top]
    if len(majority) == 1 and top > len(known) / 2:
        return [Flag(site, feature, f"{site}: {what} mostly {mode}, most sites {majority[0]}; train with {fix} "
                                    "or resample the site's cases")
                for site, mode in sorted(known.items()) if mode != majority[0]]
    listed = ", ".join(f"{site} {mode}" for site, mode in sorted(known.items()))
    return [Flag(site, feature, f"sites differ in {what} ({listed}); train with {fix}") for site in sorted(known)]


def _intensity_scale(summaries: Mapping[str, Mapping[str, Any]]) -> list[Flag]:
    """Sites whose stored intensities differ from the median site's by 10 times or more, per modality: from the
    sites' raw medians where released, else from their most common half-decade of 99th percentiles."""
    out = []
    for m in MODALITIES:
        scale: dict[str, float] = {}
        for site, s in summaries.items():
            q = s.get("quantiles", {}).get(f"raw_intensity/{m}", {})
            if "values" in q:
                scale[site] = math.log10(max(q["values"][q["at"].index(50)], 1e-12))
            else:
                mode = modal_cell(s, f"intensity_p99/{m}")
                if mode is not None:
                    scale[site] = _bin_centre(mode)
        if len(scale) < 2:
            continue
        median = statistics.median(scale.values())
        for site, value in sorted(scale.items()):
            if abs(value - median) >= 1.0:
                out.append(Flag(site, "intensity", f"{site}: {m} intensities about {10 ** (value - median):.3g} "
                                                   "times the median site's; check the series' rescale slope and "
                                                   "units (normalisation hides it from training, not from a model "
                                                   "trained elsewhere)"))
    return out


def _bin_centre(cell: str) -> float:
    """A half-decade cell's centre in log10 ("2.5-3 log10" -> 2.75; the open ends one half decade out)."""
    text = cell.replace(" log10", "")
    if text.startswith("< "):
        return float(text[2:]) - 0.25
    if text.startswith(">= "):
        return float(text[3:]) + 0.25
    low, high = (float(v) for v in text.split("-"))
    return (low + high) / 2
