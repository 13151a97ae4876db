"""Enhanced (multi-frame) MR and CT read as volumes: files made by highdicom's legacy converter from the project's
single-frame series, and pydicom's own Enhanced CT and MR test files; every refusal names the file and the way out."""

from __future__ import annotations

import shutil
from pathlib import Path

import highdicom as hd
import numpy as np
import pydicom
import pytest
from pydicom.data import get_testdata_file
from pydicom.dataset import Dataset
from pydicom.uid import JPEG2000Lossless, JPEGLSLossless, RLELossless

from fl_contract.labels import BRATS_2021
from site_agent.data.demo.dicom_demo import SeriesIds, write_dicom_series
from site_agent.data.dicom_seg import write_dicom_seg
from site_agent.data.readers.dicom_series import DicomSeriesReader, ordered_slices, read_dicom_series
from site_agent.data.readers.reader import DataError

pytestmark = pytest.mark.filterwarnings("ignore:The string .* is unlikely to represent the intended person name")
OBLIQUE_AFFINE = np.array(
    [[-0.9, 0.0, 0.0, 12.5], [0.0, -0.883, 0.3, -40.0], [0.0, 0.2943, 0.9, 7.25], [0.0, 0.0, 0.0, 1.0]]
)


def _single_frame_series(folder: Path, shape: tuple[int, int, int] = (6, 5, 8)) -> np.ndarray:
    stored = np.random.default_rng(0).integers(0, 4000, shape).astype(np.uint16)
    ids = SeriesIds(study="1.2.3.100", series="1.2.3.1", frame_of_reference="1.2.3.200", patient_id="P1")
    write_dicom_series(folder, stored, OBLIQUE_AFFINE, ids, "T1", slope=0.5, intercept=-10.0)
    return stored


def _legacy_converted(source: Path, out: Path, drop: int | None = None) -> Path:
    """The single-frame series in `source` as one Legacy Converted Enhanced MR file (highdicom's converter), as a
    PACS converts series; `drop`: leave that slice out."""
    slices = [pydicom.dcmread(p) for p in sorted(source.iterdir())]
    if drop is not None:
        del slices[drop]
    converted = hd.legacy.LegacyConvertedEnhancedMRImage(slices, series_instance_uid="1.2.3.9", series_number=9,
                                                         sop_instance_uid="1.2.3.9.1", instance_number=1)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "enhanced.dcm"
    converted.save_as(path)
    return path


def _per_frame(path: Path, group: str, keyword: str, values: list[object]) -> None:
    """Give each frame of a multi-frame file its own `keyword` value in functional group `group`."""
    ds = pydicom.dcmread(path)
    for item, value in zip(ds.PerFrameFunctionalGroupsSequence, values):
        if group not in item:
            setattr(item, group, [Dataset()])
        setattr(item[group][0], keyword, value)
    ds.save_as(path)


def test_enhanced_mr_reads_as_the_single_frame_series_it_was_converted_from(tmp_path):
    # Prepare
    stored = _single_frame_series(tmp_path / "single")
    _legacy_converted(tmp_path / "single", tmp_path / "enhanced")

    # Execute
    image = read_dicom_series(tmp_path / "enhanced")

    # Assert: per-frame positions and shared rescale give back the series' values and affine
    np.testing.assert_array_equal(image.array[0], stored.astype(np.float32) * 0.5 - 10.0)
    np.testing.assert_allclose(image.affine, OBLIQUE_AFFINE, atol=1e-6)


def test_enhanced_mr_matches_highdicoms_volume(tmp_path):
    # Prepare
    _single_frame_series(tmp_path / "single")
    path = _legacy_converted(tmp_path / "single", tmp_path / "enhanced")
    volume = hd.imread(path).get_volume(dtype=np.float32)

    # Execute
    image = read_dicom_series(tmp_path / "enhanced")

    # Assert: highdicom's (slice, row, column) LPS volume, as (column, row, slice) RAS along the normal
    expected = volume.array.transpose(2, 1, 0)
    affine = np.diag([-1.0, -1.0, 1.0, 1.0]) @ volume.affine[:, [2, 1, 0, 3]]
    if np.dot(affine[:3, 2], image.affine[:3, 2]) < 0:
        expected = expected[:, :, ::-1]
    np.testing.assert_array_equal(image.array[0], expected)


def test_real_enhanced_ct_reads_to_pydicom_values(tmp_path):
    # Prepare: pydicom's Enhanced CT (two frames, rescale in the shared functional groups)
    (tmp_path / "ct").mkdir()
    source = get_testdata_file("eCT_Supplemental.dcm", download=False)
    shutil.copy(source, tmp_path / "ct")
    ds = pydicom.dcmread(source)
    rescale = ds.SharedFunctionalGroupsSequence[0].PixelValueTransformationSequence[0]
    expected = ds.pixel_array * float(rescale.RescaleSlope) + float(rescale.RescaleIntercept)
    cosines = [
        float(v) for v in ds.SharedFunctionalGroupsSequence[0].PlaneOrientationSequence[0].ImageOrientationPatient
    ]
    normal = np.cross(cosines[:3], cosines[3:])
    positions = [np.asarray(f.PlanePositionSequence[0].ImagePositionPatient, dtype=float) @ normal
                 for f in ds.PerFrameFunctionalGroupsSequence]

    # Execute
    image = read_dicom_series(tmp_path / "ct")

    # Assert: frames stacked by position along the normal, 10 mm apart
    order = np.argsort(positions)
    np.testing.assert_array_equal(image.array[0], expected[order].transpose(2, 1, 0).astype(np.float32))
    assert np.linalg.norm(image.affine[:3, 2]) == pytest.approx(10.0)


@pytest.mark.parametrize("syntax", [JPEG2000Lossless, JPEGLSLossless, RLELossless])
def test_compressed_enhanced_mr_reads_like_the_uncompressed(tmp_path, syntax):
    # Prepare: 32 x 32 slices (OpenJPEG refuses to encode tiny frames)
    stored = _single_frame_series(tmp_path / "single", (32, 32, 8))
    path = _legacy_converted(tmp_path / "single", tmp_path / "enhanced")
    ds = pydicom.dcmread(path)
    ds.compress(syntax)
    ds.save_as(path)

    # Execute
    image = read_dicom_series(tmp_path / "enhanced")

    # Assert
    np.testing.assert_array_equal(image.array[0], stored.astype(np.float32) * 0.5 - 10.0)


def test_a_missing_frame_is_named_like_a_missing_slice(tmp_path):
    # Prepare
    _single_frame_series(tmp_path / "single")
    _legacy_converted(tmp_path / "single", tmp_path / "enhanced", drop=3)

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "enhanced")

    # Assert
    message = str(error.value)
    assert "about 1 missing slice(s) between enhanced.dcm frame" in message and "re-export" in message


@pytest.mark.parametrize(
    ("group", "keyword", "values", "holds", "choice"),
    [
        ("FrameContentSequence", "StackID", ["1"] * 4 + ["2"] * 4, "2 stacks (StackID 1: 4 frames, 2: 4 frames)", "2"),
        ("FrameContentSequence", "TemporalPositionIndex", [1, 2] * 4, "2 temporal positions", 2),
        ("MREchoSequence", "EffectiveEchoTime", [4.6, 9.2] * 4,
         "2 echoes (echo time in ms) (EffectiveEchoTime 4.6", 9.2),
    ],
)
def test_several_volumes_in_one_file_are_refused_naming_them_and_one_can_be_chosen(
    tmp_path, group, keyword, values, holds, choice
):
    # Prepare: two volumes of 4 frames interleaved in one 8-frame file, each volume evenly spaced
    stored = _single_frame_series(tmp_path / "single")
    path = _legacy_converted(tmp_path / "single", tmp_path / "enhanced")
    ds = pydicom.dcmread(path)
    positions = [float(f.PlanePositionSequence[0].ImagePositionPatient[2]) for f in ds.PerFrameFunctionalGroupsSequence]
    by_position = np.argsort(np.argsort(positions))  # frame -> its slice index along z
    _per_frame(path, group, keyword, [values[k] for k in by_position])

    # Execute
    with pytest.raises(DataError) as refused:
        read_dicom_series(tmp_path / "enhanced")
    chosen = DicomSeriesReader(frames={keyword: choice}).read(tmp_path / "enhanced")

    # Assert
    message = str(refused.value)
    assert message.startswith(str(path)) and holds in message and f"frames={{{keyword!r}:" in message
    assert "own series" in message
    picked = [k for k, v in enumerate(values) if v == choice]
    np.testing.assert_array_equal(chosen.array[0], stored[:, :, picked].astype(np.float32) * 0.5 - 10.0)


def test_choosing_a_volume_the_file_does_not_hold_lists_what_it_holds(tmp_path):
    # Prepare
    _single_frame_series(tmp_path / "single")
    path = _legacy_converted(tmp_path / "single", tmp_path / "enhanced")

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "enhanced", frames={"StackID": "7"})

    # Assert
    assert str(path) in str(error.value) and "no frame with StackID '7'; it holds 1: 8 frames" in str(error.value)


def test_multi_frame_without_geometry_is_refused_as_that(tmp_path):
    # Prepare: pydicom's emri_small holds 10 frames and no functional groups
    (tmp_path / "mr").mkdir()
    shutil.copy(get_testdata_file("emri_small.dcm", download=False), tmp_path / "mr")

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "mr")

    # Assert
    message = str(error.value)
    assert "emri_small.dcm: a multi-frame image of 10 frames without any geometry" in message
    assert "missing geometry tags" not in message and "Enhanced MR/CT" in message


def test_a_bad_frame_value_names_the_file_and_frame(tmp_path):
    # Prepare
    _single_frame_series(tmp_path / "single")
    path = _legacy_converted(tmp_path / "single", tmp_path / "enhanced")
    _per_frame(path, "PlanePositionSequence", "ImagePositionPatient",
               [[0.0, 0.0, 1.0 * k] for k in range(7)] + [[0, 0]])

    # Execute
    with pytest.raises(DataError) as error:
        read_dicom_series(tmp_path / "enhanced")

    # Assert
    assert str(error.value).startswith(f"{path} frame 8: ImagePositionPatient holds 2 value(s)")


def test_a_dicom_seg_over_an_enhanced_series_references_each_source_frame(tmp_path):
    # Prepare: a label map on the volume as read; the source file's frames are not in volume order
    _single_frame_series(tmp_path / "single", (16, 16, 8))
    path = _legacy_converted(tmp_path / "single", tmp_path / "enhanced")
    image = read_dicom_series(tmp_path / "enhanced")
    labels = np.zeros(image.spatial_shape, dtype=np.uint8)
    labels[3:9, 4:12, 1:6] = 2
    labels[5:7, 6:9, 2:4] = 4
    labels[4, 5, 5] = 1

    # Execute
    seg_path = write_dicom_seg(labels, BRATS_2021, tmp_path / "enhanced", tmp_path / "case.seg.dcm", "test model")

    # Assert: each source frame's SEG pixels are the label map's slice at that frame's position
    source = pydicom.dcmread(path)
    numbers = hd.seg.segread(seg_path).get_pixels_by_source_frame(
        source.SOPInstanceUID, source_frame_numbers=list(range(1, 9)), combine_segments=True,
        assert_missing_frames_are_empty=True)
    order = [item.frame for item in ordered_slices(tmp_path / "enhanced")]
    segment_of = {0: 0, 1: 1, 2: 2, 4: 3}
    for k, frame in enumerate(order):
        expected = np.vectorize(segment_of.get)(labels[:, :, k].T)
        np.testing.assert_array_equal(numbers[frame], expected)
