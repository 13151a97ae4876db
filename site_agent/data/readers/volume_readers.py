"""Where the site agent's volume readers are registered: every reader that turns a path into a 3D `Image` (a DICOM
series folder, a NIfTI file), tried in order. A new volume format is a new reader module of
`site_agent.data.readers` (an `ImageReader`: `can_read`, `read`) and one line here; every case reader, the
preflight and the jobs' tasks then read it."""

from __future__ import annotations

from pathlib import Path

from site_agent.data.readers.dicom_series import DicomSeriesReader
from site_agent.data.readers.nifti import NiftiReader
from site_agent.data.readers.reader import DataError, Image, ImageReader

VOLUME_READERS: tuple[ImageReader, ...] = (DicomSeriesReader(), NiftiReader())
FORMATS = "a DICOM series folder or a NIfTI file (.nii, .nii.gz)"
"""What `VOLUME_READERS` read, for the message about a path none of them can."""


def read_volume(path: Path) -> Image:
    """The image at `path` read by the first registered reader that can read it; DataError naming the path when
    none can."""
    for reader in VOLUME_READERS:
        if reader.can_read(path):
            return reader.read(path)
    raise DataError(f"{path}: not {FORMATS}; fix the datalist or the case folder")
