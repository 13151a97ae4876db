"""NIfTI reading never guesses: orientation codes, voxel sizes from the raw header, shapes; on nibabel's own data."""

from __future__ import annotations

import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from data.malformed import patch_nifti1_header

from site_agent.data.readers.nifti import read_nifti
from site_agent.data.readers.reader import DataError

NIBABEL_DATA = Path(nib.__file__).parent / "tests" / "data"


def _anatomical(tmp_path: Path) -> Path:
    """nibabel's anatomical.nii (33 x 41 x 25, 2 mm, qform and sform code 2), copied to be changed."""
    return Path(shutil.copy(NIBABEL_DATA / "anatomical.nii", tmp_path / "anatomical.nii"))


def test_nibabels_anatomical_reads_with_its_affine(tmp_path):
    # Prepare
    path = _anatomical(tmp_path)
    expected = nib.load(path)

    # Execute
    image = read_nifti(path)

    # Assert
    assert image.spatial_shape == (33, 41, 25)
    np.testing.assert_allclose(image.affine, expected.affine)
    np.testing.assert_array_equal(image.array[0], np.asarray(expected.dataobj, dtype=np.float32))


def test_a_header_without_orientation_is_refused(tmp_path):
    # Prepare
    path = _anatomical(tmp_path)
    patch_nifti1_header(path, qform_code=0, sform_code=0)

    # Execute
    with pytest.raises(DataError) as error:
        read_nifti(path)

    # Assert
    message = str(error.value)
    assert message.startswith(f"{path}: qform_code and sform_code are both 0") and "never guesses" in message
    assert "Re-export the volume with its orientation" in message


def test_an_sform_alone_defines_the_orientation(tmp_path):
    # Prepare: nibabel's standard.nii.gz has qform_code 0 and sform_code 2
    path = Path(shutil.copy(NIBABEL_DATA / "standard.nii.gz", tmp_path))

    # Execute
    image = read_nifti(path)

    # Assert
    np.testing.assert_allclose(image.affine, nib.load(path).header.get_sform())


@pytest.mark.parametrize(("pixdim", "shown"), [([-1, 2, 0, 2], "[0.0]"), ([-1, 2, 2, -2], "[-2.0]"),
                                               ([-1, np.nan, 2, 2], "[nan]")])
def test_voxel_sizes_are_checked_in_the_raw_header(tmp_path, pixdim, shown):
    # Prepare: nibabel alone would read 0 as 1 mm and -2 as 2 mm
    path = _anatomical(tmp_path)
    patch_nifti1_header(path, pixdim=[*pixdim, 0, 0, 0, 0])

    # Execute
    with pytest.raises(DataError) as error:
        read_nifti(path)

    # Assert
    message = str(error.value)
    assert (message.startswith(f"{path}: voxel sizes (pixdim)") and f"include {shown}" in message
            and "fix pixdim" in message)


def test_singleton_trailing_axes_are_dropped(tmp_path):
    # Prepare
    volume = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    path = tmp_path / "five_d.nii.gz"
    nib.save(nib.Nifti1Image(volume[..., None, None], np.diag([2.0, 2.0, 3.0, 1.0])), path)

    # Execute
    image = read_nifti(path)

    # Assert
    np.testing.assert_array_equal(image.array[0], volume)


def test_a_4d_file_says_what_to_do(tmp_path):
    # Prepare: nibabel's example4d.nii.gz, two volumes of 128 x 96 x 24
    path = Path(shutil.copy(NIBABEL_DATA / "example4d.nii.gz", tmp_path))

    # Execute
    with pytest.raises(DataError) as error:
        read_nifti(path)

    # Assert
    message = str(error.value)
    assert message.startswith(f"{path}: a 4-D image of shape (128, 96, 24, 2), 2 volumes in one file")
    assert "Save each volume as its own file" in message and "fslsplit" in message
