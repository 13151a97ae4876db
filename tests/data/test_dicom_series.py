"""DICOM series reading: geometry, ordering, rescale, and every bad input naming the file and the fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pydicom
import pytest
from data.malformed import write_raw_header
from pydicom.data import get_testdata_file

from site_agent.data.demo.dicom_demo import SeriesIds, write_dicom_series
from site_agent.data.readers import dicom_series
from site_agent.data.readers.dicom_series import DicomSeriesReader, read_dicom_series, series_files
from site_agent.data.readers.reader import DataError, ImageReader

OBLIQUE_AFFINE = np.array(
    [[-0.9, 0.0, 0.0, 12.5], [0.0, -0.883, 0.3, -40.0], [0.0, 0.2943, 0.9, 7.25], [0.0, 0.0, 0.0, 1.0]]
)  # tilted about x, spacing (0.9, 0.93, 0.95) mm; the slice axis runs along the row x column normal


def _volume(shape: tuple[int, int, int] = (6, 5, 8), seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 4000, shape).astype(np.uint16)


def _write(
    folder: Path, stored: np.ndarray, series: str = "1.2.3.1", affine: np.ndarray = OBLIQUE_AFFINE
) -> list[Path]:
    ids = SeriesIds(study="1.2.3.100", series=series, frame_of_reference="1.2.3.200", patient_id="P1")
    return write_dicom_series(folder, stored, affine, ids, "T1", slope=0.5, intercept=-10.0)


def _copy_test_file(name: str, folder: Path) -> Path:
    folder.mkdir()
    return Path(shutil.copy(get_testdata_file(name, download=False), folder))


def test_round_trip_gives_rescaled_values_and_affine(tmp_path):
    # Prepare
    stored = _volume()
    _write(tmp_path / "series", stored)

    # Execute
    image = read_dicom_series(tmp_path / "series")

    # Assert
    assert image.array.dtype == np.float32 and image.array.shape == (1, 6, 5, 8)
    np.testing.assert_array_equal(image.array[0], stored.astype(np.float32) * 0.5 - 10.0)
    np.testing.assert_allclose(image.affine, OBLIQUE_AFFINE, atol=1e-6)


def test_slice_axis_against_the_normal_comes_back_flipped_with_the_same_world_geometry(tmp_path):
    # Prepare: third voxel axis pointing against the slice normal
    stored = _volume()
    flip = np.diag([1.0, 1.0, -1.0, 1.0])
    flip[2, 3] = stored.shape[2] - 1
    _write(tmp_path / "series", stored, affine=OBLIQUE_AFFINE @ flip)

    # Execute
    image = read_dicom_series(tmp_path / "series")

    # Assert: every value sits at the same world position as written
    np.testing.assert_array_equal(image.array[0], stored[:, :, ::-1].astype(np.float32) * 0.5 - 10.0)
    np.testing.assert_allclose(image.affine, OBLIQUE_AFFINE, atol=1e-6)


def test_slices_are_ordered_by_position_not_file_name_or_instance_number(tmp_path):
    # Prepare: shuffle file names and write misleading InstanceNumbers
    stored = _volume()
    paths = _write(tmp_path / "series", stored)
    order = np.random.default_rng(1).permutation(len(paths))
    for new_index, path in zip(order, paths):
        ds = pydicom.dcmread(path)
        ds.InstanceNumber = int(len(paths) - new_index)
        ds.save_as(tmp_path / "series" / f"x{new_index:02d}.tmp")
        path.unlink()

    # Execute
    image = read_dicom_series(tmp_path / "series")

    # Assert
    np.testing.assert_array_equal(image.array[0], stored.astype(np.float32) * 0.5 - 10.0)
    np.testing.assert_allclose(image.affine, OBLIQUE_AFFINE, atol=1e-6)


def test_two_series_in_one_folder_are_refused_and_can_be_separated(tmp_path):
    # Prepare
    first, second = _volume(seed=1), _volume(seed=2)
    _write(tmp_path / "a", first, series="1.2.3.1")
    _write(tmp_path / "b", second, series="1.2.3.2")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for source in ("a", "b"):
        for path in (tmp_path / source).iterdir():
            shutil.copy(path, mixed / f"{source}_{path.name}")

    # Execute
    with pytest.raises(DataError) as refused:
        read_dicom_series(mixed)
    groups = series_files(mixed)
    chosen = read_dicom_series(mixed, series_uid="1.2.3.2")

    # Assert
    assert str(mixed) in str(refused.value) and "1.2.3.1" in str(refused.value) and "1.2.3.2" in str(refused.value)
    assert "own folder" in str(refused.value)
    assert {uid: len(files) for uid, files in groups.items()} == {"1.2.3.1": 8, "1.2.3.2": 8}
    np.testing.assert_array_equal(chosen.array[0], second.astype(np.float32) * 0.5 - 10.0)


def test_missing_slice_is_reported_with_its_neighbours(tmp_path):
    # Prepare
    paths = _write(tmp_path / "series", _volume())
    paths[3].unlink()

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    message = str(error.value)
    assert "about 1 missing slice" in message and "IM0003.dcm" in message and "IM0005.dcm" in message
    assert "re-export" in message


def test_duplicate_slice_is_reported(tmp_path):
    # Prepare
    paths = _write(tmp_path / "series", _volume())
    shutil.copy(paths[2], tmp_path / "series" / "copy.dcm")

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    assert "duplicate slice" in str(error.value) and "copy.dcm" in str(error.value)


def test_corrupt_file_is_named(tmp_path):
    # Prepare
    paths = _write(tmp_path / "series", _volume())
    paths[1].write_bytes(b"this is not DICOM" * 10)

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    assert str(paths[1]) in str(error.value) and "not a readable DICOM file" in str(error.value)


def test_truncated_pixel_data_is_named(tmp_path):
    # Prepare
    path = _copy_test_file("MR_truncated.dcm", tmp_path / "series")

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    assert str(path) in str(error.value) and "damaged" in str(error.value)


def test_missing_geometry_is_named(tmp_path):
    # Prepare
    paths = _write(tmp_path / "series", _volume())
    ds = pydicom.dcmread(paths[0])
    del ds.ImagePositionPatient
    ds.save_as(paths[0])

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    assert str(paths[0]) in str(error.value) and "ImagePositionPatient" in str(error.value)


@pytest.mark.filterwarnings("ignore:The pixel data is .* excess padding")
@pytest.mark.parametrize(
    "name",
    ["MR_small.dcm", "MR_small_padded.dcm", "MR_small_RLE.dcm", "MR_small_bigendian.dcm", "MR_small_implicit.dcm",
     "MR_small_expb.dcm", "CT_small.dcm"],
)
def test_real_files_read_to_pydicom_values(tmp_path, name):
    # Prepare
    _copy_test_file(name, tmp_path / "series")
    ds = pydicom.dcmread(get_testdata_file(name, download=False))
    expected = ds.pixel_array * float(ds.get("RescaleSlope", 1)) + float(ds.get("RescaleIntercept", 0))

    # Execute
    image = read_dicom_series(tmp_path / "series")

    # Assert: index (column, row, slice); origin is ImagePositionPatient flipped to RAS
    np.testing.assert_array_equal(image.array[0, :, :, 0], expected.T.astype(np.float32))
    position = np.asarray(ds.ImagePositionPatient, dtype=float)
    np.testing.assert_allclose(image.affine[:3, 3], position * [-1, -1, 1])
    np.testing.assert_allclose(np.abs(np.diag(image.affine))[:2], [float(v) for v in ds.PixelSpacing][::-1])


def test_fast_path_matches_pydicom_decoders(tmp_path, monkeypatch):
    # Prepare
    _write(tmp_path / "series", _volume())
    fast = read_dicom_series(tmp_path / "series")
    monkeypatch.setattr(dicom_series, "_NATIVE_LITTLE_ENDIAN", frozenset())

    # Execute
    decoded = read_dicom_series(tmp_path / "series")

    # Assert
    np.testing.assert_array_equal(fast.array, decoded.array)


def test_ct_small_applies_rescale_intercept(tmp_path):
    # Prepare: CT_small stores raw values with intercept -1024
    _copy_test_file("CT_small.dcm", tmp_path / "series")
    raw = pydicom.dcmread(get_testdata_file("CT_small.dcm", download=False)).pixel_array

    # Execute
    image = read_dicom_series(tmp_path / "series")

    # Assert
    assert image.array.min() == raw.min() - 1024


def test_reader_interface(tmp_path):
    # Prepare
    _write(tmp_path / "series", _volume())
    reader = DicomSeriesReader()

    # Execute / Assert
    assert isinstance(reader, ImageReader)
    assert reader.can_read(tmp_path / "series") and not reader.can_read(tmp_path / "series" / "IM0001.dcm")
    assert reader.read(tmp_path / "series").spatial_shape == (6, 5, 8)


@pytest.mark.parametrize(
    ("keyword", "value", "expected"),
    [
        ("RescaleSlope", "abc", "RescaleSlope 'abc' is not 1 finite number"),
        ("RescaleIntercept", "n/a", "RescaleIntercept 'n/a' is not 1 finite number"),
        ("RescaleSlope", "NaN", "RescaleSlope 'NaN' is not 1 finite number"),
        ("RescaleSlope", "0", "RescaleSlope is 0"),
        ("PixelSpacing", "abc\\0.9", "PixelSpacing 'abc/0.9' is not 2 finite number"),
        ("PixelSpacing", "0.9", "PixelSpacing holds 1 value(s) [0.9], expected 2"),
        ("PixelSpacing", "0\\0.9", "PixelSpacing [0.0, 0.9] is not positive"),
        ("PixelSpacing", "-0.9\\0.9", "PixelSpacing [-0.9, 0.9] is not positive"),
        ("ImageOrientationPatient", "2\\0\\0\\0\\2\\0", "length 2 and 2, not 1"),
        ("ImageOrientationPatient", "1\\0\\0\\1\\0\\0", "not perpendicular"),
        ("ImagePositionPatient", "1\\2", "ImagePositionPatient holds 2 value(s) [1.0, 2.0], expected 3"),
    ],
)
@pytest.mark.parametrize("where", ["every slice", "one slice"])
def test_bad_header_values_name_the_file_the_tag_and_the_fix(tmp_path, keyword, value, expected, where):
    # Prepare
    paths = _write(tmp_path / "series", _volume())
    bad = paths if where == "every slice" else paths[3:4]
    write_raw_header(bad, **{keyword: value})

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    message = str(error.value)
    assert message.startswith(str(bad[0])) and expected in message and "re-export" in message
    assert "duplicate" not in message


def test_orientation_written_with_few_decimals_is_accepted(tmp_path):
    # Prepare: cosines of a 45-degree rotation truncated to 4 decimals, as some exporters write them
    paths = _write(tmp_path / "series", _volume(), affine=np.diag([-1.0, -1.0, 1.0, 1.0]))
    write_raw_header(paths, ImageOrientationPatient="0.7071\\0.7071\\0\\-0.7071\\0.7071\\0")

    # Execute
    image = read_dicom_series(tmp_path / "series")

    # Assert
    assert image.spatial_shape == (6, 5, 8)


def test_a_slice_on_another_frame_of_reference_is_named(tmp_path):
    # Prepare
    paths = _write(tmp_path / "series", _volume())
    write_raw_header(paths[5:6], FrameOfReferenceUID="1.2.3.999")

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    message = str(error.value)
    assert (message.startswith(str(paths[5]))
            and "FrameOfReferenceUID 1.2.3.999 differs from the series' 1.2.3.200" in message)
    assert "7 of 8 files" in message


def test_single_slice_series_needs_a_positive_slice_spacing(tmp_path):
    # Prepare
    [path] = _write(tmp_path / "series", _volume((6, 5, 1)))
    write_raw_header([path], SpacingBetweenSlices="0")

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    assert str(path) in str(error.value) and "slice spacing 0 mm is not positive" in str(error.value)


def test_one_monochrome1_slice_in_a_monochrome2_series_is_named(tmp_path):
    # Prepare: an exporter that inverted one slice
    paths = _write(tmp_path / "series", _volume())
    write_raw_header(paths[2:3], PhotometricInterpretation="MONOCHROME1")

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    message = str(error.value)
    assert message.startswith(f"{paths[2]}: PhotometricInterpretation MONOCHROME1")
    assert "7 of the series' 8 slices are MONOCHROME2" in message
    assert "Remove the slice or re-export the series from the PACS as MONOCHROME2" in message and "{" not in message


def test_a_monochrome1_series_is_refused(tmp_path):
    # Prepare
    paths = _write(tmp_path / "series", _volume())
    write_raw_header(paths, PhotometricInterpretation="MONOCHROME1")

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    message = str(error.value)
    assert "MONOCHROME1 (inverted greyscale" in message and "in all 8 slices" in message and "as MONOCHROME2" in message


def test_a_palette_colour_slice_is_refused(tmp_path):
    # Prepare
    paths = _write(tmp_path / "series", _volume())
    write_raw_header(paths[:1], PhotometricInterpretation="PALETTE COLOR")

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "series")

    # Assert
    assert str(error.value).startswith(
        f"{paths[0]}: PhotometricInterpretation PALETTE COLOR; MR and CT series are greyscale"
    )
