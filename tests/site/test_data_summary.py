"""The data summary at the site, without FLARE processes: sites made deliberately different are flagged for exactly
their differences, every released number equals one computed from the files with nibabel and pydicom alone, a cell
below min_count never leaves, the DP noise is the accountant's, and the privacy officer's export is the job's bytes."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
import pytest

from fl_contract import data_summary as ds
from fl_contract.job_params import DataSummaryParams
from fl_contract.job_privacy import SUMMARY, SitePrivacy
from fl_contract.labels import BRATS_2021, BRATS_2023
from site_agent.cli import main
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.kit.site_config import write_site_config
from site_agent.privacy.accounting import client_dp_epsilon, job_spend
from site_agent.privacy.audit import SUMMARY_EXPORTED, AuditLog
from site_agent.privacy.policy import SitePolicy, write_policy
from site_agent.summary.export import SUMMARY_FILE, read_reviewed, summary_text
from site_agent.summary.release import observe, summarise

SHAPE = (24, 24, 24)
JOB = DataSummaryParams(label_map="brats2023", roi_size=(16, 16, 16))
MIN_COUNT = 5


def variant_sites(root: Path) -> dict[str, Path]:
    """Four sites: one without T1ce (DICOM), one at 2 mm voxels (NIfTI), one labelled in the BraTS 2018-2021
    convention (DICOM), and a reference (NIfTI) with 4 unlabelled cases besides its 6 (min_count - 1)."""
    folders = {site: root / site for site in ("site-1", "site-2", "site-3", "site-4")}
    write_brats_site(folders["site-1"], 1, 6, SHAPE, layout="dicom", label_map=BRATS_2023, missing=("t1ce",))
    write_brats_site(folders["site-2"], 2, 6, SHAPE, layout="nifti", label_map=BRATS_2023, spacing=2.0)
    write_brats_site(folders["site-3"], 3, 6, SHAPE, layout="dicom", label_map=BRATS_2021)
    write_brats_site(folders["site-4"], 4, 10, SHAPE, layout="nifti", label_map=BRATS_2023)
    for case in sorted(folders["site-4"].iterdir())[6:]:
        if case.is_dir():
            next(case.glob("*_seg.nii.gz")).unlink()
    return folders


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return variant_sites(tmp_path_factory.mktemp("summary-sites"))


@pytest.fixture(scope="module")
def summaries(sites: dict[str, Path]) -> dict[str, dict]:
    return {site: json.loads(summary_text(folder, JOB, MIN_COUNT)[0]) for site, folder in sites.items()}


def test_the_flags_name_exactly_the_sites_made_different(summaries):
    found: dict[str, set[str]] = {}
    for flag in ds.flags(summaries, JOB.content()):
        found.setdefault(flag.site, set()).add(flag.check)

    assert found == {"site-1": {"modality", "refused"}, "site-2": {"spacing_mm/x", "spacing_mm/y", "spacing_mm/z"},
                     "site-3": {"label_map", "refused"}}
    assert summaries["site-1"]["features"]["case_status"]["cells"] == {"missing t1ce": 6}
    assert summaries["site-3"]["features"]["case_status"]["cells"] == {"label not usable with the job's label_map": 6}
    assert summaries["site-3"]["features"]["label_map_fit"]["cells"] == {"brats2021 only": 6}


def test_a_cell_of_min_count_minus_one_cases_is_not_in_the_text_that_leaves(sites):
    text, problems = summary_text(sites["site-4"], JOB, MIN_COUNT)

    assert "missing label" not in text and "no label" not in text  # 4 cases: below min_count 5
    assert json.loads(text)["features"]["case_status"]["cells"] == {"usable": 6}
    kept = problems.splitlines()  # kept at the site, with the case folders named
    assert len(kept) == 4 and all(": missing label: " in line and str(sites["site-4"]) in line for line in kept)
    assert json.loads(summary_text(sites["site-4"], JOB, 4)[0])["features"]["case_status"]["cells"] == {
        "usable": 6, "missing label": 4}


def _nifti_cases(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir())


def test_every_released_number_of_a_nifti_site_equals_nibabel_s(sites, summaries):
    summary = summaries["site-2"]
    cases = _nifti_cases(sites["site-2"])
    images = {m: [nib.load(next(c.glob(f"*_{m}.nii.gz"))) for c in cases] for m in ds.MODALITIES}
    labels = [nib.load(next(c.glob("*_seg.nii.gz"))) for c in cases]
    features = summary["features"]

    for axis, index in zip(ds.AXES, range(3)):
        zooms = [float(img.header.get_zooms()[index]) for img in images["t1ce"]]
        assert features[f"spacing_mm/{axis}"]["cells"] == {ds.bin_of(zooms[0], ds.SPACING_EDGES, "mm"): len(cases)}
        assert zooms == [2.0] * len(cases)
        assert features[f"shape/{axis}"]["cells"] == {ds.bin_of(SHAPE[index], ds.SHAPE_EDGES, "voxels"): len(cases)}
    assert features["orientation"]["cells"] == {"".join(nib.aff2axcodes(images["t1ce"][0].affine)): len(cases)}
    for m in ds.MODALITIES:
        voxels = [np.asarray(img.dataobj, dtype=np.float64) for img in images[m]]
        percentiles = np.mean([np.percentile(v[v != 0], ds.VOXEL_QUANTILES) for v in voxels], axis=0)
        assert summary["quantiles"][f"raw_intensity/{m}"]["values"] == pytest.approx(percentiles, rel=2e-3)
        p99 = [ds.bin_of(math.log10(np.percentile(v[v != 0], 99)), ds.LOG_INTENSITY_EDGES, "log10") for v in voxels]
        assert features[f"intensity_p99/{m}"]["cells"] == {c: p99.count(c) for c in set(p99)
                                                            if p99.count(c) >= MIN_COUNT}
        z = [(v[v != 0] - v[v != 0].mean()) / v[v != 0].std() for v in voxels]  # the job's z-score over the brain
        normalised = np.mean([np.percentile(x, ds.VOXEL_QUANTILES) for x in z], axis=0)
        assert summary["quantiles"][f"intensity/{m}"]["values"] == pytest.approx(normalised, rel=2e-3, abs=1e-3)
    volumes = {"TC": (1, 3), "WT": (1, 2, 3), "ET": (3,)}  # brats2023: 3 is enhancing
    for region, values in volumes.items():
        millilitres = [float(np.isin(np.asarray(lab.dataobj), values).sum()) * 8.0 / 1000 for lab in labels]
        assert summary["quantiles"][f"tumour_ml/{region}"]["values"] == pytest.approx(
            np.percentile(millilitres, ds.CASE_QUANTILES), rel=2e-3)
        cells = [ds.tumour_cell(v) for v in millilitres]
        assert features[f"tumour_ml/{region}"]["cells"] == {c: cells.count(c) for c in set(cells)
                                                             if cells.count(c) >= MIN_COUNT}


def test_the_scanner_cells_of_a_dicom_site_equal_pydicom_s_reading_of_its_headers(sites, summaries):
    cases = _nifti_cases(sites["site-3"])
    headers = [pydicom.dcmread(sorted((c / "T1").iterdir())[0], stop_before_pixels=True) for c in cases]
    features = summaries["site-3"]["features"]

    assert {h.Manufacturer for h in headers} == {"hospital-fl"}
    assert features["manufacturer"]["cells"] == {"other": len(cases)}  # no vendor of the list
    assert features["model"]["cells"] == {headers[0].ManufacturerModelName: len(cases)}
    assert {h.file_meta.TransferSyntaxUID for h in headers} == {pydicom.uid.ExplicitVRLittleEndian}
    assert features["transfer_syntax"]["cells"] == {"Explicit VR Little Endian": len(cases)}
    assert features["slice_thickness_mm"]["cells"] == {
        ds.bin_of(float(headers[0].SliceThickness), ds.THICKNESS_EDGES, "mm"): len(cases)}
    assert features["field_strength"]["cells"] == {ds.NOT_RECORDED: len(cases)}  # the demo writes none


def test_the_dp_noise_is_the_accountant_s_and_withholds_quantiles_and_model_names(sites):
    job = JOB.replace(dp_noise_multiplier=0.25)
    observations = observe(sites["site-4"], job)
    draws = [summarise(observations, job, 0, np.random.default_rng(seed)) for seed in range(300)]
    dp = draws[0]["dp"]
    features = [f for f in ds.glioma_features() if f.cells is not None]

    assert dp["features"] == len(features) and dp["sigma"] == pytest.approx(0.25 * math.sqrt(len(features)))
    spend = job_spend(SitePrivacy.declare("data-summary", SUMMARY, {"dp_noise_multiplier": 0.25}))
    assert dp["epsilon"] == spend.epsilon == client_dp_epsilon(0.25, 1) and dp["delta"] == spend.delta
    # a cell of 6 true cases, 4.7 sigma from 0 (no clamping): the noise's spread is the declared sigma (and the
    # rounding's 1/12 variance)
    usable = np.array([d["features"]["case_status"]["cells"].get("usable", 0) for d in draws], dtype=float)
    assert usable.mean() == pytest.approx(6.0, abs=0.3)
    assert usable.std() == pytest.approx(math.sqrt(dp["sigma"] ** 2 + 1 / 12), rel=0.12)
    assert all("values" not in q for q in draws[0]["quantiles"].values())
    assert "withheld" in draws[0]["features"]["model"]


def test_an_isic_site_counts_classes_sizes_and_colours(tmp_path):
    folder = tmp_path / "isic"
    write_isic_site(folder, 1, n_images=40, seed=0)
    job = DataSummaryParams(data_kind="isic", dataset="isic")

    summary = json.loads(summary_text(folder, job, MIN_COUNT)[0])

    classes = summary["features"]["class"]["cells"]
    assert sum(classes.values()) <= 40 and set(classes) <= set(job.classes)
    assert summary["quantiles"]["colour/R"]["cases"] == summary["features"]["case_status"]["cells"][ds.USABLE] == 40
    flagged = {f.message for f in ds.flags({"site-1": summary}, job.content())}
    assert {c for c in job.classes if not classes.get(c)} == {
        c for c in job.classes if any(f"class {c} " in m for m in flagged)}


def _kit(tmp_path: Path, data: Path, min_count: int = MIN_COUNT) -> Path:
    kit = tmp_path / "site-4"
    (kit / "local").mkdir(parents=True)
    write_policy(kit / "local", SitePolicy(allowed_job_kinds=("data-summary",), min_count=min_count))
    write_site_config(kit, {"brats": str(data)})
    return kit


def test_the_privacy_officer_s_export_is_the_job_s_text_and_is_audited(tmp_path, sites, capsys):
    kit = _kit(tmp_path, sites["site-4"])
    out = tmp_path / "export"

    code = main(["summary", "export", "--kit", str(kit), "--out", str(out), "--set", "label_map=brats2023",
                 "--set", "roi_size=[16,16,16]"])

    assert code == 0
    assert (out / SUMMARY_FILE).read_text() == summary_text(sites["site-4"], JOB, MIN_COUNT)[0]
    printed = capsys.readouterr().out
    assert "case_status" in printed and "usable: 6" in printed and "4 cases a training job would refuse" in printed
    assert [e["event"] for e in AuditLog(kit / "local").entries()] == [SUMMARY_EXPORTED]
    assert read_reviewed(out, JOB, MIN_COUNT) == (out / SUMMARY_FILE).read_text()


def test_a_reviewed_export_is_refused_for_another_job_a_stricter_policy_or_an_edited_cell(tmp_path, sites):
    out = tmp_path / "export"
    out.mkdir()
    text = summary_text(sites["site-4"], JOB, MIN_COUNT)[0]
    (out / SUMMARY_FILE).write_text(text)

    with pytest.raises(ValueError, match="params is .*the job needs"):
        read_reviewed(out, JOB.replace(label_map="brats2021"), MIN_COUNT)
    with pytest.raises(ValueError, match="min_count is 5, the job needs 8"):
        read_reviewed(out, JOB, 8)
    edited = json.loads(text)
    edited["features"]["case_status"]["cells"]["missing label"] = 4
    (out / SUMMARY_FILE).write_text(ds.dumps(edited))
    with pytest.raises(ValueError, match="case_status/missing label holds 4"):
        read_reviewed(out, JOB, MIN_COUNT)
    shutil.rmtree(out)
    with pytest.raises(FileNotFoundError, match="site-agent summary export"):
        read_reviewed(out, JOB, MIN_COUNT)


def test_the_report_page_shows_the_flags_and_the_sites_side_by_side_and_withholds_nothing_as_zero(
        tmp_path, summaries):
    from PIL import Image
    from support import non_blank, screenshot

    from fl_contract.params import params_to_json
    from reports.data_summary import main as report

    hostile = {**summaries, "<b>site-5</b>": summaries["site-4"]}
    results = {"job": {"workflow": "data summary", **params_to_json(JOB)}, "status": "finished", "sites": hostile,
               "federation": ds.pooled(hostile), "flags": [f.to_json() for f in ds.flags(hostile, JOB.content())]}
    (tmp_path / "results.json").write_text(json.dumps(results))

    assert report([str(tmp_path / "results.json"), "--out", str(tmp_path / "report")]) == 0

    html = (tmp_path / "report" / "data_summary.html").read_text()
    assert "<b>site-5</b>" not in html and "&lt;b&gt;site-5&lt;/b&gt;" in html and "<script" not in html
    assert html.index("Flags") < html.index("case_status") and "missing t1ce" in html
    assert "brats2021 convention" in html and "spacing_mm/x" in html
    pooled = ds.pooled(hostile)["features"]["case_status"]["cells"]["usable"]
    assert pooled == 6 + 6 + 6 and f"<td>{pooled}</td>" in html  # site-2, site-4 and the copy of site-4
    shot = screenshot(tmp_path / "report" / "data_summary.html", tmp_path / "report" / "page.png", 1200, 1600)
    assert non_blank(shot) and Image.open(shot).size == (1200, 1600)


def test_fl_job_export_warns_of_what_the_summary_says_against_the_training_job(tmp_path, summaries, capsys):
    from federation_tools.job_cli import main as fl_job
    from fl_contract.params import params_to_json

    results = {"job": {"workflow": "data summary", **params_to_json(JOB)}, "sites": summaries}
    (tmp_path / "results.json").write_text(json.dumps(results))
    base = ["export", "brats-segmentation", "--data-summary", str(tmp_path / "results.json"), "--label-map",
            "brats2023", "--init-filters", "8", "--blocks-down", "1", "1", "--blocks-up", "1"]

    assert fl_job([*base, "--out", str(tmp_path / "a"), "--roi-size", "32", "32", "32"]) == 0
    warned = capsys.readouterr().err
    assert "site-3: 6 cases are labelled in the brats2021 convention" in warned
    assert "site-1: t1ce missing" in warned and "site-2: voxel size along x" in warned
    assert "smaller than roi_size [32, 32, 32]" in warned  # 24-voxel volumes under a crop of 32
    assert fl_job([*base, "--out", str(tmp_path / "b"), "--roi-size", "16", "16", "16"]) == 0
    assert "smaller than roi_size" not in capsys.readouterr().err
    assert (tmp_path / "b" / "brats-segmentation").is_dir()
