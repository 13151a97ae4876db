"""`site-agent check` reads the data: each dataset key's kind told from its content, counts, one case or image read
(every one with --deep), and every malformed input of the data tests reported by file, with the reason."""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from data.malformed import claim_size, poison_voxel, set_label_voxel, write_raw_header

from fl_contract.classes import TRAINING_CLASSES
from fl_contract.labels import BRATS_2023
from fl_contract.models.dcae import CONFIG_FILE, build_tiny_dcae, save_autoencoder
from site_agent.data.demo.linear_demo import write_linear_site
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.data.inspection import detect_kind
from site_agent.data.isic import GROUND_TRUTH_CSV, IMAGE_FOLDER, METADATA_CSV
from site_agent.kit.preflight import CheckResult, check_data, format_table, progress_bar
from site_agent.kit.site_config import write_site_config
from site_agent.kit.startup import SiteKit

SHAPE = (16, 16, 16)


def _kit(tmp_path: Path, datasets: dict[str, Path]) -> SiteKit:
    root = tmp_path / "kit"
    write_site_config(root, {key: str(folder) for key, folder in datasets.items()})
    return SiteKit(root, "site-1", "localhost", 8002, "server")


def _brats(tmp_path: Path, layout: str = "dicom", n_cases: int = 3, label_map=None) -> Path:
    extra = {} if label_map is None else {"label_map": label_map}
    write_brats_site(tmp_path / f"brats-{layout}", 1, n_cases, SHAPE, seed=2, layout=layout, **extra)
    return tmp_path / f"brats-{layout}"


def _isic(tmp_path: Path) -> Path:
    return write_isic_site(tmp_path / "isic", 1, n_images=20, classes=TRAINING_CLASSES[:4], size=24, seed=1)


def _images(site: Path) -> list[Path]:
    """The ISIC site's images in CSV order."""
    with (site / GROUND_TRUTH_CSV).open(newline="") as f:
        names = [row["image"] for row in csv.DictReader(f)]
    return [site / IMAGE_FOLDER / f"{name}.jpg" for name in names]


def _check(kit: SiteKit, deep: bool = False) -> dict[str, CheckResult]:
    return {r.name: r for r in check_data(kit, deep=deep)}


def test_each_kind_is_told_by_content_counted_and_read(tmp_path):
    # Prepare
    brats, isic = _brats(tmp_path), _isic(tmp_path)
    write_linear_site(tmp_path / "linear", 2)
    save_autoencoder(build_tiny_dcae(), tmp_path / "ae", clip_norm=8.0, provenance="test")
    with (isic / GROUND_TRUTH_CSV).open(newline="") as f:
        counts = Counter(c for row in csv.DictReader(f) for c in TRAINING_CLASSES if row[c] == "1.0")
    kit = _kit(tmp_path, {"glioma": brats, "derm": isic, "smoke": tmp_path / "linear", "model": tmp_path / "ae"})

    # Execute
    results = _check(kit)

    # Assert: keys are free names; the content says what each holds
    assert [r.status for r in results.values()] == ["OK"] * 4
    glioma = f"{brats}: glioma MRI, 3 labelled cases (DICOM 3); Site1_000 read; labels fit brats2021"
    assert results["data glioma"].detail == glioma
    expected_counts = ", ".join(f"{c} {counts[c]}" for c in TRAINING_CLASSES if counts[c])
    assert results["data derm"].detail.startswith(f"{isic}: ISIC 2019 dermoscopy, 20 images ({expected_counts}); ISIC_")
    assert results["data smoke"].detail.endswith("linear demo, linear.npz read; 200 samples of 2 features")
    assert results["data model"].detail.endswith("autoencoder, ae read; clip norm R = 8")
    kinds = [detect_kind(p) for p in (brats, isic, tmp_path / "linear", tmp_path / "ae")]
    assert kinds == ["glioma", "isic", "linear", "autoencoder"]


def test_nifti_cases_in_the_2023_map_are_reported_as_such(tmp_path):
    # Prepare
    kit = _kit(tmp_path, {"brats": _brats(tmp_path, "nifti", n_cases=2, label_map=BRATS_2023)})

    # Execute
    [result] = check_data(kit, deep=True)

    # Assert
    assert result.status == "OK" and "2 labelled cases (NIfTI 2); all 2 read; labels fit brats2023" in result.detail


def _dicom_header(**values: str) -> Callable[[Path], Path]:
    def damage(site: Path) -> Path:
        path = site / "Site1_001" / "T2" / "IM0005.dcm"
        write_raw_header([path], **values)
        return path

    return damage


def _nifti_voxel(value: float) -> Callable[[Path], Path]:
    def damage(site: Path) -> Path:
        path = site / "Site1_001" / "Site1_001_flair.nii.gz"
        poison_voxel(path, value)
        return path

    return damage


def _unknown_label(site: Path) -> Path:
    path = site / "Site1_001" / "Site1_001_seg.nii.gz"
    set_label_voxel(path, 7)
    return path


def _corrupt_slice(site: Path) -> Path:
    path = site / "Site1_001" / "T1" / "IM0003.dcm"
    path.write_bytes(b"not DICOM at all")
    return path


def _truncated_slice(site: Path) -> Path:
    path = site / "Site1_001" / "T1" / "IM0003.dcm"
    path.write_bytes(path.read_bytes()[:200])  # preamble, DICM and part of the file meta: a copy cut short
    return path


def _looping_modality(site: Path) -> Path:
    path = site / "Site1_001" / "Site1_001_t2.nii.gz"
    path.unlink()
    path.symlink_to(path.name)
    return path


def _monochrome1_slice(site: Path) -> Path:
    path = site / "Site1_001" / "T2" / "IM0004.dcm"
    write_raw_header([path], PhotometricInterpretation="MONOCHROME1")
    return path


def _no_orientation(site: Path) -> Path:
    path = site / "Site1_001" / "Site1_001_t1.nii.gz"
    image = nib.load(path)
    image.set_qform(None, code=0)
    image.set_sform(None, code=0)
    nib.save(image, path)
    return path


GLIOMA_DAMAGE = {
    "RescaleSlope not a number": ("dicom", _dicom_header(RescaleSlope="abc"),
                                  "RescaleSlope 'abc' is not 1 finite number"),
    "RescaleIntercept not a number": ("dicom", _dicom_header(RescaleIntercept="x"),
                                      "RescaleIntercept 'x' is not 1 finite"),
    "RescaleSlope 0": ("dicom", _dicom_header(RescaleSlope="0"), "RescaleSlope is 0"),
    "PixelSpacing with one value": ("dicom", _dicom_header(PixelSpacing="1"), "PixelSpacing holds 1 value(s)"),
    "PixelSpacing negative": ("dicom", _dicom_header(PixelSpacing="-1\\1"), "PixelSpacing [-1.0, 1.0] is not positive"),
    "orientation not unit length": ("dicom", _dicom_header(ImageOrientationPatient="2\\0\\0\\0\\2\\0"), "not 1"),
    "orientation parallel": ("dicom", _dicom_header(ImageOrientationPatient="1\\0\\0\\1\\0\\0"), "not perpendicular"),
    "other frame of reference": ("dicom", _dicom_header(FrameOfReferenceUID="1.2.3"),
                                 "FrameOfReferenceUID 1.2.3 differs"),
    "unreadable slice": ("dicom", _corrupt_slice, "not a readable DICOM file"),
    "NaN voxel": ("nifti", _nifti_voxel(np.nan), "values are not finite (1 NaN"),
    "infinite voxel": ("nifti", _nifti_voxel(np.inf), "values are not finite (0 NaN, 1 infinite)"),
    "unknown label value": ("nifti", _unknown_label, "label values [0, 1, 2, 4, 7] fit no known label map"),
    "truncated slice": ("dicom", _truncated_slice, "the file is empty or truncated"),
    "MONOCHROME1 slice": ("dicom", _monochrome1_slice, "MONOCHROME1 (inverted greyscale) while 15 of the series' 16"),
    "NIfTI without orientation": ("nifti", _no_orientation, "qform_code and sform_code are both 0"),
}


@pytest.mark.parametrize("damage", GLIOMA_DAMAGE)
def test_a_bad_glioma_case_passes_a_quick_check_and_is_named_by_the_deep_check(tmp_path, damage):
    # Prepare: the second case is damaged; the quick check reads the first only
    layout, apply, expected = GLIOMA_DAMAGE[damage]
    site = _brats(tmp_path, layout)
    bad = apply(site)
    kit = _kit(tmp_path, {"brats": site})

    # Execute
    [quick] = check_data(kit)
    [deep] = check_data(kit, deep=True)

    # Assert
    assert quick.status == "OK" and "Site1_000 read" in quick.detail
    assert deep.status == "FAIL" and "1 problem(s) listed below" in deep.detail
    assert "2 of 3 read" in deep.detail
    [problem] = deep.problems
    assert problem.startswith(str(bad)) and expected in problem


def test_a_modality_file_that_is_a_looping_link_is_named(tmp_path):
    # Prepare
    site = _brats(tmp_path, "nifti")
    path = _looping_modality(site)

    # Execute
    [result] = check_data(_kit(tmp_path, {"brats": site}))

    # Assert
    assert result.status == "FAIL"
    assert result.problems == (f"{path}: a symbolic link that loops or points to nothing; replace it with the NIfTI "
                               "file itself",)


def test_a_case_missing_a_series_fails_even_the_quick_check(tmp_path):
    # Prepare
    site = _brats(tmp_path)
    shutil.rmtree(site / "Site1_002" / "FLAIR")

    # Execute
    [result] = check_data(_kit(tmp_path, {"brats": site}))

    # Assert
    assert result.status == "FAIL" and "2 labelled cases (DICOM 2)" in result.detail
    [problem] = result.problems
    assert problem.startswith(f"{site / 'Site1_002'}: missing modality flair: expected the DICOM series folder FLAIR/")


def test_cases_in_different_label_maps_are_refused_together(tmp_path):
    # Prepare: one case of the 2021 map beside the 2023 cases
    site = _brats(tmp_path, "nifti", n_cases=2, label_map=BRATS_2023)
    shutil.copytree(_brats(tmp_path / "old", "nifti", n_cases=1) / "Site1_000", site / "Old_000")

    # Execute
    [result] = check_data(_kit(tmp_path, {"brats": site}), deep=True)

    # Assert
    assert result.status == "FAIL"
    assert result.problems == ("the cases' labels fit no single label map (Old_000: brats2021; Site1_000: brats2023; "
                               "Site1_001: brats2023); relabel the cases to one map (docs/site-data.md)",)


def _corrupt_jpeg(images: list[Path]) -> tuple[Path, str]:
    images[2].write_bytes(images[2].read_bytes()[:200])
    return images[2], "image does not decode"


def _bomb(images: list[Path]) -> tuple[Path, str]:
    claim_size(images[2], 60_000, 60_000)
    return images[2], "image too large"


@pytest.mark.parametrize("damage", [_corrupt_jpeg, _bomb], ids=["corrupt JPEG", "decompression bomb"])
def test_a_bad_image_passes_a_quick_check_and_is_named_by_the_deep_check(tmp_path, damage):
    # Prepare
    site = _isic(tmp_path)
    bad, expected = damage(_images(site))
    kit = _kit(tmp_path, {"isic": site})

    # Execute
    [quick] = check_data(kit)
    [deep] = check_data(kit, deep=True)

    # Assert
    assert quick.status == "OK"
    assert deep.status == "FAIL" and "19 of 20 read" in deep.detail
    [problem] = deep.problems
    assert problem.startswith(str(bad)) and expected in problem


def _rewrite_rows(site: Path, edit: Callable[[list[dict[str, str]]], None]) -> None:
    path = site / GROUND_TRUTH_CSV
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    edit(rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(out.getvalue())


def test_every_unusable_csv_row_fails_even_the_quick_check(tmp_path):
    # Prepare: a label value that is not one-hot and a row whose image is gone
    site = _isic(tmp_path)
    images = _images(site)
    _rewrite_rows(site, lambda rows: rows[3].update(MEL="2.0"))
    images[5].unlink()

    # Execute
    [result] = check_data(_kit(tmp_path, {"isic": site}))

    # Assert
    truth = site / GROUND_TRUTH_CSV
    assert result.status == "FAIL" and "18 images" in result.detail
    assert result.problems[0] == (f"{truth}, line 5 ({images[3].stem}): column MEL is '2.0', "
                                  "expected 0.0 or 1.0 (one-hot)")
    assert result.problems[1].startswith(f"{truth}, line 7 ({images[5].stem}): image missing")


def test_a_ground_truth_csv_with_a_byte_order_mark_passes(tmp_path):
    # Prepare
    site = _isic(tmp_path)
    truth = site / GROUND_TRUTH_CSV
    truth.write_bytes(b"\xef\xbb\xbf" + truth.read_bytes())

    # Execute
    [result] = check_data(_kit(tmp_path, {"isic": site}), deep=True)

    # Assert
    assert result.status == "OK" and "20 images" in result.detail


def test_a_latin1_metadata_csv_fails_naming_the_encoding_to_use(tmp_path):
    # Prepare
    site = _isic(tmp_path)
    metadata = site / METADATA_CSV
    metadata.write_bytes(metadata.read_text().replace("female", "f\u00e9minin").encode("latin-1"))

    # Execute
    [result] = check_data(_kit(tmp_path, {"isic": site}))

    # Assert
    assert result.status == "FAIL" and result.detail.startswith(f"{metadata}: not UTF-8 text")
    assert "Save it as UTF-8" in result.detail


def test_unknown_empty_and_missing_folders(tmp_path):
    # Prepare
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not data")
    kit = _kit(tmp_path, {"notes": tmp_path / "notes", "empty": tmp_path / "empty", "gone": tmp_path / "gone"})

    # Execute
    results = _check(kit)

    # Assert
    assert results["data notes"].status == "WARN"
    assert "not checked, it holds none of an ISIC" in results["data notes"].detail
    assert results["data empty"].status == "WARN" and "empty; fine for an output folder" in results["data empty"].detail
    assert results["data gone"].status == "FAIL" and "which is not a folder" in results["data gone"].detail


def test_a_broken_autoencoder_folder_fails(tmp_path):
    # Prepare
    folder = save_autoencoder(build_tiny_dcae(), tmp_path / "ae", clip_norm=8.0, provenance="test")
    (folder / CONFIG_FILE).write_text(json.dumps({"_class_name": "AutoencoderDC", "in_channels": "three"}))

    # Execute
    [result] = check_data(_kit(tmp_path, {"dcae": folder}))

    # Assert
    assert result.status == "FAIL" and result.problems[0].startswith(f"{folder}: the autoencoder does not load")


def test_the_deep_check_reports_progress_per_key_and_lists_every_problem_under_the_table(tmp_path):
    # Prepare
    site = _isic(tmp_path)
    images = _images(site)
    for image in images[1:3]:
        image.write_bytes(b"\xff\xd8 not a jpeg")
    kit = _kit(tmp_path, {"isic": site})
    calls: list[tuple[str, int, int]] = []
    stream = io.StringIO()

    # Execute
    results = check_data(kit, deep=True, progress=lambda *call: calls.append(call))
    bar = progress_bar(stream)
    bar("isic", 5, 20)
    bar("isic", 20, 20)
    table = format_table(results)

    # Assert
    assert calls == [("isic", n, 20) for n in range(1, 21)]
    assert stream.getvalue() == ("\rdata isic [#######.......................] 5/20"
                                 "\rdata isic [##############################] 20/20\n")
    assert "data isic: 2 problem(s):\n" in table
    assert f"  {images[1]}: image does not decode" in table and f"  {images[2]}: image does not decode" in table


def test_read_is_said_only_of_what_read(tmp_path):
    # Prepare: the first case, the one a quick check reads, has an unreadable slice
    site = _brats(tmp_path)
    (site / "Site1_000" / "T1" / "IM0003.dcm").write_bytes(b"not DICOM at all")

    # Execute
    [quick] = check_data(_kit(tmp_path, {"brats": site}))

    # Assert
    assert quick.status == "FAIL" and "Site1_000 did not read" in quick.detail and "Site1_000 read" not in quick.detail


def test_a_series_folder_given_directly_is_read_and_warned(tmp_path):
    # Prepare
    series = _brats(tmp_path) / "Site1_000" / "T1GD"

    # Execute
    [result] = check_data(_kit(tmp_path, {"brats": series}))

    # Assert
    assert result.status == "WARN"
    assert result.detail == f"{series}: one DICOM series, T1GD read; 16 x 16 x 16 voxels of 1 x 1 x 1 mm"
    assert "folder holding the case folders" in result.fix


def test_a_series_folder_given_directly_that_does_not_read_fails(tmp_path):
    # Prepare
    series = _brats(tmp_path) / "Site1_000" / "T1GD"
    (series / "IM0005.dcm").unlink()

    # Execute
    [result] = check_data(_kit(tmp_path, {"brats": series}))

    # Assert
    assert result.status == "FAIL" and "T1GD did not read" in result.detail
    assert "about 1 missing slice(s) between IM0004.dcm and IM0006.dcm" in result.problems[0]
