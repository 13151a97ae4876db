"""Every transfer syntax common for MR/CT decodes through the public reader to pydicom's own values.

Files are pydicom's bundled test files and the `pydicom-data` wheel's (vendor MR and CT), read offline; the
non-MR/CT ones (the only 12-bit JPEG Extended, JPEG Lossless and deflated samples) are given a position,
orientation and pixel spacing, their encoded pixel data untouched.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pydicom
import pytest
from PIL import Image as PilImage
from pydicom.data import get_testdata_file
from pydicom.encaps import encapsulate
from pydicom.uid import JPEGBaseline8Bit

from site_agent.data.readers.dicom_series import read_dicom_series

pytestmark = pytest.mark.filterwarnings("ignore:The (pixel data|number of bytes).*:UserWarning")
WITH_GEOMETRY = ["MR_small_jpeg_ls_lossless.dcm", "MR_small_jp2klossless.dcm", "MR_small_RLE.dcm", "MR2_J2KR.dcm",
                 "MR2_J2KI.dcm", "693_J2KR.dcm", "693_J2KI.dcm", "bad_sequence.dcm", "MR2_UNCR.dcm",
                 "MR-SIEMENS-DICOM-WithOverlays.dcm"]
"""MR and CT: JPEG-LS, JPEG 2000 lossless and lossy, RLE, JPEG Lossless SV1 (12-bit CT), uncompressed 12-bit."""
WITHOUT_GEOMETRY = ["JPGExtended.dcm", "JPEG-LL.dcm", "JPEGLSNearLossless_16.dcm", "image_dfl.dcm", "JPEG2000.dcm"]
"""JPEG Extended 12-bit, JPEG Lossless SV1 16-bit, JPEG-LS near-lossless, deflated explicit VR, JPEG 2000."""


def _assert_equal(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal to float32 rounding: the reader scales in float32, the expectation in float64."""
    np.testing.assert_allclose(actual, expected.astype(np.float32), rtol=2e-7, atol=0)


def _expected(path: str) -> np.ndarray:
    ds = pydicom.dcmread(path)
    return np.asarray(ds.pixel_array * float(ds.get("RescaleSlope", 1)) + float(ds.get("RescaleIntercept", 0)))


def _placed(source: str | Path, folder: Path) -> Path:
    """A copy of `source` with geometry tags (and a series UID) added; its pixel data stays as encoded."""
    folder.mkdir(parents=True, exist_ok=True)
    ds = pydicom.dcmread(source)
    ds.ImagePositionPatient = [0, 0, 0]
    ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
    ds.PixelSpacing = [1, 1]
    ds.SeriesInstanceUID = ds.get("SeriesInstanceUID") or "1.2.3.4"
    path = folder / Path(source).name
    ds.save_as(path)
    return path


@pytest.mark.parametrize("name", WITH_GEOMETRY)
def test_vendor_mr_and_ct_read_to_pydicom_values(tmp_path, name):
    # Prepare
    source = get_testdata_file(name, download=False)
    assert source is not None, f"{name}: install the test dependencies (pydicom-data)"
    (tmp_path / "series").mkdir()
    shutil.copy(source, tmp_path / "series")

    # Execute
    image = read_dicom_series(tmp_path / "series")

    # Assert
    _assert_equal(image.array[0, :, :, 0], _expected(source).T)


@pytest.mark.parametrize("name", WITHOUT_GEOMETRY)
def test_other_encodings_read_to_pydicom_values(tmp_path, name):
    # Prepare
    source = get_testdata_file(name, download=False)
    _placed(source, tmp_path / "series")

    # Execute
    image = read_dicom_series(tmp_path / "series")

    # Assert
    _assert_equal(image.array[0, :, :, 0], _expected(source).T)


def test_jpeg_baseline_greyscale_reads_to_pydicom_values(tmp_path):
    # Prepare: MR_small as 8-bit JPEG baseline, encoded by Pillow (pydicom ships no greyscale baseline sample)
    ds = pydicom.dcmread(get_testdata_file("MR_small.dcm", download=False))
    pixels = (ds.pixel_array.astype(float) / ds.pixel_array.max() * 255).astype(np.uint8)
    encoded = io.BytesIO()
    PilImage.fromarray(pixels).save(encoded, format="JPEG", quality=90)
    ds.PixelData = encapsulate([encoded.getvalue()])
    ds.file_meta.TransferSyntaxUID = JPEGBaseline8Bit
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds["PixelData"].VR = "OB"
    (tmp_path / "series").mkdir()
    path = tmp_path / "series" / "baseline.dcm"
    ds.save_as(path)

    # Execute
    image = read_dicom_series(tmp_path / "series")

    # Assert: pydicom's decode of the same file, and near the original (lossy)
    np.testing.assert_array_equal(image.array[0, :, :, 0], _expected(str(path)).T.astype(np.float32))
    assert np.abs(image.array[0, :, :, 0] - pixels.T).mean() < 3


def test_a_missing_decoder_names_the_packages_to_install(tmp_path):
    # Prepare: a JPEG-LS series, read by a process in which neither JPEG-LS decoder package can be imported
    path = _placed(get_testdata_file("MR_small_jpeg_ls_lossless.dcm", download=False), tmp_path / "series")
    blocked = "import sys; [sys.modules.__setitem__(m, None) for m in ('jpeg_ls', 'pylibjpeg', 'libjpeg', 'gdcm')]; "
    read = (f"from site_agent.data.readers.dicom_series import read_dicom_series\n"
            f"try:\n    read_dicom_series({str(tmp_path / 'series')!r})\n"
            f"except Exception as err:\n    print(type(err).__name__, err)")

    # Execute
    run = subprocess.run([sys.executable, "-c", blocked + "\n" + read], capture_output=True, text=True, timeout=120,
                         check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})

    # Assert
    message = run.stdout
    assert message.startswith(f"DataError {path}: cannot decode its JPEG-LS Lossless Image Compression pixel data")
    assert "pyjpegls" in message and "pylibjpeg-libjpeg" in message and "`pip install pylibjpeg " in message

