"""Demo DICOM series writing: single-frame MR Image Storage files, one per slice, as a scanner exports them.

Kept apart from the reader (`site_agent.data.readers.dicom_series`) so that reading a hospital's files never depends on
how the project writes its own. Every type 1 and type 2 attribute of the MR Image IOD's modules (patient, study,
series, frame of reference, equipment, image plane, image pixel, MR image, SOP common) is written, so that
dicom3tools' `dciodvfy` finds no error in a generated slice and a DICOM SEG over the series inherits complete
patient and study attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, MRImageStorage, generate_uid

from fl_contract.version import AGENT_VERSION
from site_agent.data.readers.dicom_series import LPS_TO_RAS

_STUDY_DATE, _STUDY_TIME = "20240101", "120000"
"""Fixed, so that the same input writes byte-identical files."""


@dataclass(frozen=True)
class SeriesIds:
    """The UIDs that tie slices into a series, series into a study, and series onto one frame of reference."""

    study: str
    series: str
    frame_of_reference: str
    patient_id: str


def write_dicom_series(
    folder: Path,
    stored: np.ndarray,
    affine: np.ndarray,
    ids: SeriesIds,
    description: str,
    slope: float = 1.0,
    intercept: float = 0.0,
    series_number: int = 1,
) -> list[Path]:
    """Write a (X, Y, Z) uint16 volume as one single-frame MR file per slice, with all geometry tags.

    `affine` is RAS voxel-to-world (as for NIfTI); `read_dicom_series` gives back `stored * slope + intercept`
    and the same affine. SOP instance UIDs derive from the series UID, so the same input writes the same files.
    """
    if stored.ndim != 3 or stored.dtype != np.uint16:
        raise ValueError(f"expected a (X, Y, Z) uint16 volume, got {stored.shape} {stored.dtype}")
    lps = LPS_TO_RAS @ np.asarray(affine, dtype=float)
    col_step, row_step, slice_step, origin = lps[:3, 0], lps[:3, 1], lps[:3, 2], lps[:3, 3]
    col_spacing, row_spacing = float(np.linalg.norm(col_step)), float(np.linalg.norm(row_step))
    if abs(np.dot(col_step, row_step)) > 1e-6 * col_spacing * row_spacing:
        raise ValueError("DICOM slices need orthogonal in-plane axes: the affine's first two columns are not")
    orientation = [*(col_step / col_spacing), *(row_step / row_spacing)]
    slice_spacing = float(np.linalg.norm(slice_step))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(stored.shape[2]):
        ds = _slice_header(ids, description, series_number, k)
        ds.ImagePositionPatient = [_ds_decimal(v) for v in origin + k * slice_step]
        ds.ImageOrientationPatient = [_ds_decimal(v) for v in orientation]
        ds.SliceLocation = _ds_decimal(
            float(np.dot(origin + k * slice_step, np.cross(orientation[:3], orientation[3:])))
        )
        ds.PixelSpacing = [_ds_decimal(row_spacing), _ds_decimal(col_spacing)]
        ds.SliceThickness = _ds_decimal(slice_spacing)
        ds.SpacingBetweenSlices = _ds_decimal(slice_spacing)
        ds.RescaleSlope = _ds_decimal(slope)
        ds.RescaleIntercept = _ds_decimal(intercept)
        ds.set_pixel_data(np.ascontiguousarray(stored[:, :, k].T), "MONOCHROME2", 16, generate_instance_uid=False)
        path = folder / f"IM{k + 1:04d}.dcm"
        ds.save_as(path, enforce_file_format=True)
        paths.append(path)
    return paths


def _slice_header(ids: SeriesIds, description: str, series_number: int, index: int) -> Dataset:
    """A complete MR image header, as a scanner export would carry it, so the demo series go through the same reader
    checks (identity, geometry, required attributes) as a PACS export rather than a shortcut."""
    sop_uid = generate_uid(entropy_srcs=[ids.series, str(index)])
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = MRImageStorage
    meta.MediaStorageSOPInstanceUID = sop_uid
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SpecificCharacterSet = "ISO_IR 100"
    ds.ImageType = ["ORIGINAL", "PRIMARY", "OTHER"]
    ds.SOPClassUID = MRImageStorage
    ds.SOPInstanceUID = sop_uid
    ds.StudyDate = ds.SeriesDate = ds.ContentDate = _STUDY_DATE
    ds.StudyTime = ds.SeriesTime = ds.ContentTime = _STUDY_TIME
    ds.AccessionNumber = ""
    ds.Modality = "MR"
    ds.Manufacturer = "hospital-fl"
    ds.ReferringPhysicianName = ""
    ds.StudyDescription = "synthetic demo study"
    ds.SeriesDescription = description
    ds.ManufacturerModelName = "site_agent demo-data"
    ds.PatientName = f"{ids.patient_id}^"  # family name only: a name without a component separator is a retired form
    ds.PatientID = ids.patient_id
    ds.PatientBirthDate = ""
    ds.PatientSex = ""
    ds.ScanningSequence = "SE"
    ds.SequenceVariant = "NONE"
    ds.ScanOptions = ""
    ds.MRAcquisitionType = "3D"
    ds.EchoTime = "10"
    ds.RepetitionTime = "500"
    ds.EchoTrainLength = "1"
    ds.SoftwareVersions = AGENT_VERSION
    ds.StudyInstanceUID = ids.study
    ds.SeriesInstanceUID = ids.series
    ds.StudyID = "1"
    ds.SeriesNumber = series_number
    ds.InstanceNumber = index + 1
    ds.FrameOfReferenceUID = ids.frame_of_reference
    ds.PositionReferenceIndicator = ""
    ds.PatientPosition = "HFS"
    ds.BodyPartExamined = "BRAIN"  # an unpaired body part: Laterality (type 2C) is then absent
    return ds


def _ds_decimal(value: float) -> str:
    """DICOM DS values hold at most 16 characters; 10 significant digits keep positions exact to ~1e-6 mm."""
    return f"{float(value):.10g}"
