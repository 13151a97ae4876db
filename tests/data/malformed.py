"""Malformed inputs as hospitals' exports produce them, made from the project's own well-formed data: the data
tests and the `site-agent check` tests damage files the same way."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
from pydicom.datadict import dictionary_VR
from pydicom.dataelem import RawDataElement
from pydicom.tag import Tag

from site_agent.data.readers.nifti import read_nifti, write_nifti


def write_raw_header(paths: list[Path], **values: str) -> None:
    """Write DICOM header values as the raw text an export may hold (values separated by backslashes), past
    pydicom's value checks."""
    for path in paths:
        ds = pydicom.dcmread(path)
        for keyword, text in values.items():
            tag = Tag(keyword)
            raw = text.encode("ascii") + b" " * (len(text) % 2)
            ds[tag] = RawDataElement(tag, dictionary_VR(tag), len(raw), raw, 0, False, True)
        ds.save_as(path)


def poison_voxel(path: Path, value: float) -> None:
    """Overwrite one voxel of a NIfTI volume with `value` (NaN or infinite, as a failed preprocessing leaves)."""
    image = read_nifti(path)
    array = image.array[0].copy()
    array[3, 4, 5] = value
    write_nifti(path, array, image.affine)


def set_label_voxel(path: Path, value: int) -> None:
    """Give one voxel of a NIfTI label volume the label `value`."""
    label = read_nifti(path)
    array = label.array[0].astype(np.uint8)
    array[0, 0, 0] = value
    write_nifti(path, array, label.affine)


def claim_size(jpeg: Path, width: int, height: int) -> None:
    """Rewrite a JPEG's frame header to claim `width` x `height` pixels: a decompression bomb's few bytes."""
    data = bytearray(jpeg.read_bytes())
    frame = data.index(b"\xff\xc0")  # start of frame: marker, length (2), precision (1), height (2), width (2)
    data[frame + 5 : frame + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    jpeg.write_bytes(bytes(data))


def patch_nifti1_header(path: Path, **fields: object) -> None:
    """Overwrite fields of an uncompressed NIfTI-1 file's header in place, as raw bytes (nibabel, asked to save
    them, would recompute pixdim and the codes from the affine)."""
    order = nib.load(path).header.endianness  # type: ignore[attr-defined]
    data = bytearray(path.read_bytes())
    for name, value in fields.items():
        field_dtype, offset = nib.Nifti1Header.template_dtype.fields[name][:2]
        raw = np.asarray(value, dtype=field_dtype.base.newbyteorder(order)).tobytes()
        data[offset : offset + len(raw)] = raw
    path.write_bytes(bytes(data))
