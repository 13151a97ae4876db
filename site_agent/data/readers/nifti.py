"""NIfTI volumes with nibabel: the BraTS-style per-modality files and every label volume."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
from nibabel.openers import ImageOpener

from site_agent.data.readers.reader import DataError, Image, os_error, refuse_broken_link, require_finite

NIFTI_SUFFIXES = (".nii.gz", ".nii")
_MIN_VOXEL_VOLUME_MM3 = 1e-9


def is_nifti(path: Path) -> bool:
    return Path(path).name.endswith(NIFTI_SUFFIXES)


def read_nifti(path: Path) -> Image:
    """Read a 3-D NIfTI file (trailing axes of size 1 are dropped) as a (1, X, Y, Z) float32 `Image`.

    The orientation is never guessed: a header with qform_code and sform_code both 0 is refused, and so are voxel
    sizes (pixdim) that are zero, negative or not finite, read from the raw header before nibabel would repair them.
    """
    path = Path(path)
    refuse_broken_link(path, "NIfTI file")
    if not path.is_file():
        raise DataError(f"{path}: file not found; check the case folder and the file naming")
    if not os.access(path, os.R_OK):  # nibabel reports it as "could not read file", like a damaged one
        raise os_error(path, PermissionError(errno.EACCES, "permission denied"), "NIfTI file")
    try:
        img = nib.load(path)
        if not isinstance(img, nib.Nifti1Image):  # Nifti2Image is one too
            raise TypeError(f"a {type(img).__name__}, not a NIfTI-1/2 image")
    except OSError as err:
        raise _open_error(path, err) from err
    except Exception as err:  # nibabel raises ImageFileError, EOFError, zlib/gzip errors for damaged files
        raise DataError(f"{path}: not a readable NIfTI file ({err}); replace it with a valid .nii/.nii.gz") from err
    shape = _squeezed_shape(path, tuple(int(n) for n in img.shape))
    _check_header(path, _raw_header(path, img), len(shape))
    try:
        array = np.asarray(img.dataobj, dtype=np.float32).reshape(shape)
    except OSError as err:
        raise _open_error(path, err) from err
    except Exception as err:
        raise DataError(f"{path}: not a readable NIfTI file ({err}); replace it with a valid .nii/.nii.gz") from err
    affine = np.asarray(img.affine, dtype=np.float64)
    if not np.isfinite(affine).all() or abs(np.linalg.det(affine[:3, :3])) < _MIN_VOXEL_VOLUME_MM3:
        raise DataError(
            f"{path}: the header's voxel-to-world affine {affine[:3].tolist()} is not finite or has a zero voxel size; "
            "fix the header (pixdim, sform/qform) or re-export the volume"
        )
    return require_finite(Image(array[None], affine, path), "re-export the volume (NaN or infinite values often come "
                          "from a failed registration or bias-field correction) or replace them before use")


def _open_error(path: Path, err: OSError) -> DataError:
    """Permissions and looping links get their own messages; other OS errors on a NIfTI file mean a damaged one
    (gzip raises OSError/EOFError on a truncated .nii.gz)."""
    if isinstance(err, PermissionError) or err.errno == errno.ELOOP:
        return os_error(path, err, "NIfTI file")
    return DataError(f"{path}: not a readable NIfTI file ({err}); the file is damaged or truncated, replace it with a "
                     "valid .nii/.nii.gz")


def _squeezed_shape(path: Path, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape without trailing axes of size 1 (some tools write (X, Y, Z, 1, 1)); 3-D or a `DataError`."""
    squeezed = shape
    while len(squeezed) > 3 and squeezed[-1] == 1:
        squeezed = squeezed[:-1]
    if len(squeezed) == 4:
        raise DataError(
            f"{path}: a 4-D image of shape {shape}, {squeezed[3]} volumes in one file (a time series, or several "
            "modalities stacked); the agent reads one 3-D volume per file. Save each volume as its own file (e.g. "
            "`fslsplit IN OUT -t`) named as docs/site-data.md says, and keep the one this case needs"
        )
    if len(squeezed) != 3:
        raise DataError(f"{path}: a {len(squeezed)}-D image of shape {shape}; expected one 3-D volume per file "
                        "(docs/site-data.md)")
    return squeezed


def _raw_header(path: Path, img: nib.Nifti1Image) -> Any:
    """The header as the file holds it: nibabel's loaded header has zero voxel sizes already replaced by 1."""
    with ImageOpener(str(path)) as stream:
        return type(img.header).from_fileobj(stream, check=False)  # type: ignore[no-untyped-call]


def _check_header(path: Path, header: Any, ndim: int) -> None:
    """Orientation codes and voxel sizes as written in the file, before nibabel's defaults stand in for them."""
    qform, sform = int(header["qform_code"]), int(header["sform_code"])
    if qform == 0 and sform == 0:
        raise DataError(
            f"{path}: qform_code and sform_code are both 0: the header defines no orientation, so which way the voxel "
            "axes point in the patient is unknown (tools guess differently, left/right or anterior/posterior can "
            "flip); the agent never guesses. Re-export the volume with its orientation (e.g. dcm2niix from the "
            "DICOM series), or set the sform/qform from the source scan (e.g. `fslorient -copyqform2sform` after "
            "fixing the qform) and check it in a viewer"
        )
    pixdim = [float(v) for v in header["pixdim"][1 : 1 + ndim]]
    bad = [v for v in pixdim if not np.isfinite(v) or v <= 0]
    if bad:
        raise DataError(
            f"{path}: voxel sizes (pixdim) {pixdim} in the header include {bad}: not positive and finite, so distances "
            "and volumes are undefined (nibabel would silently use 1 mm or the absolute value); fix pixdim in the "
            "header or re-export the volume"
        )


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
