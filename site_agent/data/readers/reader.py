"""The one reader interface shared by the DICOM, NIfTI and ISIC readers, the one data error type, and the checks
every decoded image passes.

Every reader turns one path (a DICOM series folder, a NIfTI file, a photo) into an `Image`: a float32,
channel-first array plus the voxel-to-world affine, so that callers never branch on the file format.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np


class DataError(ValueError):
    """A site's data cannot be used as it is. The message names the file/case/field and says what to do."""


@dataclass(frozen=True)
class Image:
    """A decoded image: `array` is float32 and channel-first, (C, X, Y, Z) for volumes and (C, H, W) for photos.

    `affine` maps voxel indices to world coordinates in millimetres, RAS+ as in NIfTI (DICOM's LPS is converted);
    photos carry an identity pixel grid. `source` is the file or folder it was read from, for error messages.
    """

    array: np.ndarray
    affine: np.ndarray
    source: Path

    @property
    def spatial_shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape[1:])


@runtime_checkable
class ImageReader(Protocol):
    """Reads one kind of input. `can_read` lets callers pick a reader for a path without trying to decode it."""

    def can_read(self, path: Path) -> bool: ...

    def read(self, path: Path) -> Image: ...


def require_finite(image: Image, fix: str) -> Image:
    """`image` itself if every value is finite: a NaN or infinite voxel would otherwise poison training silently.
    `fix` says what to do about it, for the message."""
    finite = np.isfinite(image.array)
    if not finite.all():
        nan = int(np.isnan(image.array).sum())
        raise DataError(
            f"{image.source}: {finite.size - int(finite.sum())} of {finite.size} values are not finite "
            f"({nan} NaN, {finite.size - int(finite.sum()) - nan} infinite); {fix}"
        )
    return image


def refuse_broken_link(path: Path, what: str) -> None:
    """A `DataError` naming `path` if it is a symbolic link that loops or points to nothing: listings skip such
    a link as "not a file", so without this the error would name what is missing instead of the link."""
    if path.is_symlink() and not path.exists():
        raise DataError(f"{path}: a symbolic link that loops or points to nothing; replace it with the {what} itself")


def os_error(path: Path, err: OSError, what: str) -> DataError:
    """The message for a file the operating system would not open, by cause: permissions, a looping link, other."""
    if isinstance(err, PermissionError):
        return DataError(f"{path}: cannot be read by this user (permission denied); give the agent's service account "
                         f"read access to the {what} and its folder (e.g. chgrp/chmod g+r), "
                         "or copy it where it can read")
    if err.errno == errno.ELOOP:
        return DataError(f"{path}: a symbolic link that loops; replace it with the {what} itself")
    return DataError(f"{path}: cannot be opened ({err}); check the {what} and the disk, or replace the file")
