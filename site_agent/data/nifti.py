"""NIfTI volumes with nibabel: the BraTS-style per-modality files and every label volume."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np

from site_agent.data.reader import DataError, Image, require_finite

NIFTI_SUFFIXES = (".nii.gz", ".nii")
_MIN_VOXEL_VOLUME_MM3 = 1e-9


def is_nifti(path: Path) -> bool:
    return Path(path).name.endswith(NIFTI_SUFFIXES)


def read_nifti(path: Path) -> Image:
    """Read a 3-D NIfTI file (a trailing axis of size 1 is accepted) as a (1, X, Y, Z) float32 `Image`."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found; check the case folder and the file naming")
    try:
        img = nib.load(path)
        if not isinstance(img, nib.Nifti1Image):  # Nifti2Image is one too
            raise TypeError(f"a {type(img).__name__}, not a NIfTI-1/2 image")
        array = np.asarray(img.dataobj, dtype=np.float32)
    except Exception as err:  # nibabel raises ImageFileError, EOFError, zlib/gzip errors for damaged files
        raise DataError(f"{path}: not a readable NIfTI file ({err}); replace it with a valid .nii/.nii.gz") from err
    if array.ndim == 4 and array.shape[3] == 1:
        array = array[..., 0]
    if array.ndim != 3:
        raise DataError(f"{path}: a {array.ndim}-D image of shape {array.shape}; expected one 3-D volume per file")
    affine = np.asarray(img.affine, dtype=np.float64)
    if not np.isfinite(affine).all() or abs(np.linalg.det(affine[:3, :3])) < _MIN_VOXEL_VOLUME_MM3:
        raise DataError(
            f"{path}: the header's voxel-to-world affine {affine[:3].tolist()} is not finite or has a zero voxel size; "
            "fix the header (pixdim, sform/qform) or re-export the volume"
        )
    return require_finite(Image(array[None], affine, path), "re-export the volume (NaN or infinite values often come "
                          "from a failed registration or bias-field correction) or replace them before use")


def write_nifti(path: Path, array: np.ndarray, affine: np.ndarray) -> Path:
    """Write a (X, Y, Z) volume with its RAS affine; integer arrays (labels) keep their integer type."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    img = nib.Nifti1Image(array, np.asarray(affine, dtype=np.float64))  # type: ignore[no-untyped-call]
    img.set_qform(img.affine, code=1)  # type: ignore[no-untyped-call]
    img.set_sform(img.affine, code=1)  # type: ignore[no-untyped-call]
    nib.save(img, path)
    return path


@dataclass(frozen=True)
class NiftiReader:
    """`ImageReader` for `.nii` / `.nii.gz` files."""

    def can_read(self, path: Path) -> bool:
        return is_nifti(path)

    def read(self, path: Path) -> Image:
        return read_nifti(path)
