"""BraTS-style cases: both layouts round-trip, channel order, label maps, grids, and bad cases named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from data.malformed import poison_voxel

from fl_contract.labels import BRATS_2021, BRATS_2023
from site_agent.data.brats_case import (
    MODALITIES,
    brats_dataset,
    discover_cases,
    fitting_label_maps,
    label_values,
    read_case,
    read_datalist,
    write_datalist,
)
from site_agent.data.demo.synthetic_brats import synthetic_case, write_brats_site
from site_agent.data.readers.nifti import read_nifti, write_nifti
from site_agent.data.readers.reader import DataError

SHAPE = (24, 24, 24)


def _site(tmp_path: Path, layout: str = "nifti", n_cases: int = 1, label_map=BRATS_2021, site_index: int = 1) -> Path:
    write_brats_site(tmp_path / "site", site_index, n_cases, SHAPE, seed=3, layout=layout, label_map=label_map)
    return tmp_path / "site"


def _regions(label: np.ndarray, enhancing: int) -> np.ndarray:
    return np.stack(
        [np.isin(label, (1, enhancing)), np.isin(label, (1, 2, enhancing)), label == enhancing]
    ).astype(np.float32)


@pytest.mark.parametrize("layout", ["dicom", "nifti"])
def test_case_round_trip_in_both_layouts(tmp_path, layout):
    # Prepare
    site = _site(tmp_path, layout)
    expected = synthetic_case(1, 0, SHAPE, seed=3)

    # Execute
    (case,) = discover_cases(site)
    image, label = read_case(case)

    # Assert
    assert case.case_id == "Site1_000"
    assert image.array.shape == (4, *SHAPE) and image.array.dtype == np.float32
    np.testing.assert_array_equal(image.array, expected.image)
    np.testing.assert_allclose(image.affine, expected.affine, atol=1e-6)
    np.testing.assert_array_equal(label.array[0], expected.label)


def test_channels_follow_the_documented_order_whatever_the_folder_names(tmp_path):
    # Prepare: DICOM series folders under site-specific names
    site = _site(tmp_path, "dicom")
    names = {"t1": "t1_mprage", "t1ce": "t1_post_gd", "t2": "t2_tse", "flair": "flair_3d"}
    case_dir = site / "Site1_000"
    for modality, default in zip(MODALITIES, ("T1", "T1GD", "T2", "FLAIR")):
        (case_dir / default).rename(case_dir / names[modality])

    # Execute
    (case,) = discover_cases(site, dicom_folders=names)
    image, _ = read_case(case)

    # Assert
    assert [p.name for p in case.images] == [names[m] for m in MODALITIES]
    np.testing.assert_array_equal(image.array, synthetic_case(1, 0, SHAPE, seed=3).image)


def test_dataset_gives_image_and_tc_wt_et_channels(tmp_path):
    # Prepare
    site = _site(tmp_path, "dicom", n_cases=2)
    cases = discover_cases(site)

    # Execute
    dataset = brats_dataset(cases)
    item = dataset[1]

    # Assert
    expected = synthetic_case(1, 1, SHAPE, seed=3)
    assert len(dataset) == 2 and item["case_id"] == "Site1_001"
    assert tuple(item["image"].shape) == (4, *SHAPE) and str(item["image"].dtype) == "torch.float32"
    np.testing.assert_array_equal(item["image"].numpy(), expected.image)
    np.testing.assert_array_equal(item["label"].numpy(), _regions(expected.label, 4))
    np.testing.assert_allclose(item["image"].affine.numpy(), expected.affine, atol=1e-6)


def test_brats_2023_label_map(tmp_path):
    # Prepare
    site = _site(tmp_path, "nifti", label_map=BRATS_2023)
    expected = synthetic_case(1, 0, SHAPE, seed=3, label_map=BRATS_2023).label

    # Execute
    item = brats_dataset(discover_cases(site), label_map=BRATS_2023, cache_rate=0.0)[0]

    # Assert
    assert set(np.unique(expected)) == {0, 1, 2, 3}
    np.testing.assert_array_equal(item["label"].numpy(), _regions(expected, 3))
    assert item["label"][2].sum() > 0


def test_brats_2023_labels_read_with_the_2021_map_are_refused_with_a_hint(tmp_path):
    # Prepare
    site = _site(tmp_path, "nifti", label_map=BRATS_2023)

    # Execute
    with pytest.raises(DataError) as error:
        read_case(discover_cases(site)[0], BRATS_2021)

    # Assert
    message = str(error.value)
    assert "Site1_000_seg.nii.gz" in message and "[3]" in message and "brats2023" in message


def test_unknown_label_values_name_the_file_and_values(tmp_path):
    # Prepare
    site = _site(tmp_path, "nifti")
    label_path = site / "Site1_000" / "Site1_000_seg.nii.gz"
    label = read_nifti(label_path)
    bad = label.array[0].astype(np.uint8)
    bad[0, 0, 0], bad[0, 0, 1] = 5, 7
    write_nifti(label_path, bad, label.affine)

    # Execute
    with pytest.raises(DataError) as error:
        read_case(discover_cases(site)[0])

    # Assert
    assert (str(label_path) in str(error.value) and "[5, 7]" in str(error.value)
            and "fix the segmentation" in str(error.value))


def test_missing_modality_names_case_and_modality(tmp_path):
    # Prepare
    site = _site(tmp_path, "dicom")
    shutil.rmtree(site / "Site1_000" / "T2")

    # Execute
    with pytest.raises(DataError) as error:
        discover_cases(site)

    # Assert
    message = str(error.value)
    assert "Site1_000" in message and "missing modality t2" in message and "T2/" in message


def test_missing_nifti_modality_and_label(tmp_path):
    # Prepare
    site = _site(tmp_path, "nifti")
    (site / "Site1_000" / "Site1_000_flair.nii.gz").unlink()
    (site / "Site1_000" / "Site1_000_seg.nii.gz").rename(site / "label.nii.gz")

    # Execute
    with pytest.raises(DataError) as modality_error:
        discover_cases(site)
    (site / "label.nii.gz").rename(site / "Site1_000" / "Site1_000_flair.nii.gz")
    with pytest.raises(DataError) as label_error:
        discover_cases(site)
    unlabelled = discover_cases(site, require_labels=False)

    # Assert
    assert "missing modality flair" in str(modality_error.value) and "*_flair.nii.gz" in str(modality_error.value)
    assert "missing label" in str(label_error.value) and "require_labels=False" in str(label_error.value)
    assert unlabelled[0].label is None and read_case(unlabelled[0])[1] is None


def test_label_image_shape_mismatch_is_refused(tmp_path):
    # Prepare
    site = _site(tmp_path, "dicom")
    label_path = site / "Site1_000" / "Site1_000_seg.nii.gz"
    label = read_nifti(label_path)
    write_nifti(label_path, label.array[0, :, :, :20].astype(np.uint8), label.affine)

    # Execute
    with pytest.raises(DataError) as error:
        read_case(discover_cases(site)[0])

    # Assert
    assert (str(label_path) in str(error.value) and "(24, 24, 20)" in str(error.value)
            and "(24, 24, 24)" in str(error.value))


def _shift_t2_by_one_voxel(site: Path) -> np.ndarray:
    path = site / "Site1_000" / "Site1_000_t2.nii.gz"
    t2 = read_nifti(path)
    shifted = t2.affine.copy()
    shifted[:3, 3] += shifted[:3, 0]  # voxel i of the file now lies where reference voxel i + 1 does
    write_nifti(path, t2.array[0], shifted)
    return t2.array[0]


def test_grid_mismatch_is_refused_by_default(tmp_path):
    # Prepare
    site = _site(tmp_path, "nifti")
    _shift_t2_by_one_voxel(site)

    # Execute
    with pytest.raises(DataError) as error:
        read_case(discover_cases(site)[0])

    # Assert
    message = str(error.value)
    assert "Site1_000_t2.nii.gz" in message and "t1ce grid" in message and "grid='resample'" in message


def test_grid_mismatch_is_resampled_on_request(tmp_path):
    # Prepare
    site = _site(tmp_path, "nifti")
    t2 = _shift_t2_by_one_voxel(site)

    # Execute
    image, _ = read_case(discover_cases(site)[0], grid="resample")

    # Assert: reference voxel i + 1 holds file voxel i; the voxel outside the file's field of view is zero
    assert image.array.shape == (4, *SHAPE)
    np.testing.assert_allclose(image.array[2, 1:], t2[:-1], atol=1e-3)
    assert np.all(image.array[2, 0] == 0)


def test_datalist_round_trip(tmp_path):
    # Prepare
    site = _site(tmp_path, "dicom", n_cases=2)
    cases = discover_cases(site)

    # Execute
    path = write_datalist(cases, site / "list.json", BRATS_2023)
    content = json.loads(path.read_text())

    # Assert
    assert read_datalist(path) == cases
    assert content["modality"] == {"0": "t1", "1": "t1ce", "2": "t2", "3": "flair"}
    assert content["labels"]["3"] == "enhancing tumour" and content["label_map"] == "brats2023"
    assert content["numTraining"] == 2
    assert content["training"][0]["image"][1] == "Site1_000/T1GD"
    assert content["training"][0]["label"] == "Site1_000/Site1_000_seg.nii.gz"


def test_empty_site_folder_is_refused(tmp_path):
    # Execute
    with pytest.raises(DataError) as error:
        discover_cases(tmp_path)

    # Assert
    assert str(tmp_path) in str(error.value) and "one sub-folder per case" in str(error.value)


@pytest.mark.parametrize(("value", "counts"), [(np.nan, "1 NaN, 0 infinite"), (np.inf, "0 NaN, 1 infinite")])
def test_nan_or_infinite_voxels_in_a_nifti_modality_are_refused(tmp_path, value, counts):
    # Prepare
    site = _site(tmp_path, "nifti")
    path = site / "Site1_000" / "Site1_000_t2.nii.gz"
    poison_voxel(path, value)

    # Execute
    with pytest.raises(DataError) as error:
        read_case(discover_cases(site)[0])

    # Assert
    message = str(error.value)
    assert message.startswith(str(path)) and f"1 of {np.prod(SHAPE)} values are not finite ({counts})" in message
    assert "re-export" in message


def test_a_nifti_header_with_a_zero_voxel_size_is_refused(tmp_path):
    # Prepare
    site = _site(tmp_path, "nifti")
    path = site / "Site1_000" / "Site1_000_flair.nii.gz"
    stored = nib.load(path)
    flat = stored.affine.copy()
    flat[:, 2] = 0.0  # an sform whose third voxel axis has length 0, and no qform to fall back on
    header = stored.header.copy()
    header.set_sform(flat, code=1)
    header.set_qform(None, code=0)
    nib.save(nib.Nifti1Image(np.asarray(stored.dataobj), None, header), path)

    # Execute
    with pytest.raises(DataError) as error:
        read_nifti(path)

    # Assert
    assert str(path) in str(error.value) and "zero voxel size" in str(error.value)


@pytest.mark.parametrize("cache_rate", [1.0, 0.5, 0.0], ids=["cached up front", "half cached", "read lazily"])
def test_a_bad_case_reached_through_the_dataset_raises_the_data_error_itself(tmp_path, cache_rate):
    # Prepare: the second case (beyond the cached half) has a NaN voxel
    site = _site(tmp_path, "nifti", n_cases=2)
    path = site / "Site1_001" / "Site1_001_flair.nii.gz"
    poison_voxel(path, np.nan)
    cases = discover_cases(site)

    # Execute
    with pytest.raises(DataError) as error:
        dataset = brats_dataset(cases, cache_rate=cache_rate)
        dataset[0]
        dataset[1]

    # Assert
    message = str(error.value)
    assert type(error.value) is DataError and message.startswith(str(path)) and "not finite" in message
    assert "applying transform" not in message and " object at 0x" not in message


def test_label_map_none_accepts_any_known_map_and_refuses_the_rest(tmp_path):
    # Prepare
    site = _site(tmp_path, "nifti", label_map=BRATS_2023)
    (case,) = discover_cases(site)
    label = read_nifti(case.label)
    mixed = label.array[0].astype(np.uint8)
    mixed[0, 0, 0] = 4  # 3 and 4 together fit neither map

    # Execute
    _, fits = read_case(case, label_map=None)
    write_nifti(case.label, mixed, label.affine)
    with pytest.raises(DataError) as error:
        read_case(case, label_map=None)

    # Assert
    assert fits is not None and [m.name for m in fitting_label_maps(label_values(fits))] == ["brats2023"]
    assert str(case.label) in str(error.value) and "[0, 1, 2, 3, 4] fit no known label map" in str(error.value)


@pytest.mark.parametrize(
    "content", ['{"training": [{"label": "x"}]}', '{"training": [{"image": []}]}', '{"training": ["x"]}']
)
def test_a_datalist_with_malformed_entries_is_refused_by_name(tmp_path, content):
    # Prepare
    path = tmp_path / "datalist.json"
    path.write_text(content)

    # Execute
    with pytest.raises(DataError) as error:
        read_datalist(path)

    # Assert
    assert str(path) in str(error.value) and "regenerate it with write_datalist" in str(error.value)
