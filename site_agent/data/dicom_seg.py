"""BraTS label maps as DICOM Segmentation objects (highdicom) that a PACS viewer overlays on the source series.

The SEG references the series the label map was computed on (the reference modality's DICOM folder): same
patient, study and frame of reference, one frame per source slice that holds a label, each frame naming its source
instance. Segments are the three BraTS labels (necrotic core, edema, enhancing tumour), disjoint as in the label
map, so a viewer shows exactly the NIfTI label map written beside it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import highdicom as hd
import numpy as np
from pydicom.dataset import Dataset
from pydicom.sr.codedict import codes
from pydicom.sr.coding import Code
from pydicom.uid import generate_uid

from fl_contract.labels import LabelMap
from fl_contract.version import AGENT_VERSION
from site_agent.data.readers.dicom_series import ordered_slices
from site_agent.data.readers.reader import DataError

SEG_SERIES_NUMBER = 900
_TYPE_2_STUDY_ATTRIBUTES = ("PatientBirthDate", "PatientSex", "AccessionNumber", "StudyID", "StudyDate", "StudyTime",
                            "ReferringPhysicianName")
"""Patient and study attributes the SEG copies from its source; type 2 (present, may be empty), yet exports and
anonymisers often drop them, so a missing one is copied as empty."""
SEG_SERIES_DESCRIPTION = "BraTS segmentation (federated model)"


@dataclass(frozen=True)
class Segment:
    """One DICOM segment: its number in the SEG, its label, SNOMED CT type and display colour."""

    number: int
    label: str
    property_type: Code
    colour: str


def brats_segments(label_map: LabelMap) -> dict[int, Segment]:
    """The label map's values (necrosis, edema, enhancing) -> their DICOM segments (BraTS viewers' colours)."""
    return {LabelMap.NECROSIS: Segment(1, "Necrotic tumour core", codes.SCT.Necrosis, "red"),
            LabelMap.EDEMA: Segment(2, "Peritumoral edema", codes.SCT.Edema, "green"),
            label_map.enhancing: Segment(3, "Enhancing tumour", codes.SCT.Neoplasm, "yellow")}


def write_dicom_seg(labels: np.ndarray, label_map: LabelMap, source_series: Path, path: Path,
                    model_description: str) -> Path:
    """Write the (X, Y, Z) label map as a binary DICOM SEG over the DICOM series in `source_series`.

    `labels` must lie on that series' grid as `site_agent.data.readers.dicom_series.read_dicom_series` reads it; frame k
    covers its slice k (for an Enhanced multi-frame source, the SEG's frames follow the source file's frames).
    `model_description` names the model in the SEG's algorithm identification.
    """
    slices = ordered_slices(source_series)
    sources = list({id(item.ds): item.ds for item in slices}.values())
    for ds in sources:  # in memory only: the source files are never changed
        for keyword in _TYPE_2_STUDY_ATTRIBUTES:
            if keyword not in ds:
                setattr(ds, keyword, "")
    rows, cols = int(sources[0].Rows), int(sources[0].Columns)
    if labels.shape != (cols, rows, len(slices)):
        raise ValueError(f"label map of shape {labels.shape} does not lie on the grid of {source_series} "
                         f"({cols} columns, {rows} rows, {len(slices)} slices)")
    segments = brats_segments(label_map)
    numbers = np.zeros(labels.shape, dtype=np.uint8)
    for value, segment in segments.items():
        numbers[labels == value] = segment.number
    frames = np.ascontiguousarray(numbers.transpose(2, 1, 0))  # (slice, row, column)
    if slices[0].frame is not None:  # a multi-frame source: one SEG frame per source frame, in the file's order
        if len(sources) > 1:
            raise DataError(f"{source_series}: a series of {len(sources)} multi-frame files; a DICOM SEG is written "
                            "over one multi-frame file or single-frame slices (the NIfTI label map holds the result)")
        in_file_order = np.zeros_like(frames)
        in_file_order[[int(item.frame or 0) for item in slices]] = frames
        frames = in_file_order
    algorithm = hd.AlgorithmIdentificationSequence(name="hospital-fl SegResNet",
                                                   family=codes.cid7162.ArtificialIntelligence,
                                                   version=model_description)
    descriptions = [
        hd.seg.SegmentDescription(segment_number=s.number, segment_label=s.label,
                                  segmented_property_category=codes.SCT.MorphologicallyAbnormalStructure,
                                  segmented_property_type=s.property_type,
                                  algorithm_type=hd.seg.SegmentAlgorithmTypeValues.AUTOMATIC,
                                  algorithm_identification=algorithm, anatomic_regions=[codes.SCT.Brain],
                                  display_color=hd.color.CIELabColor.from_string(s.colour))
        for s in sorted(segments.values(), key=lambda s: s.number)]
    series_uid = generate_uid()
    with warnings.catch_warnings():  # highdicom questions the source's PatientName; the SEG copies it unchanged
        warnings.filterwarnings("ignore", message=".*unlikely to represent the intended person name")
        seg = _segmentation(sources, frames, descriptions, series_uid, model_description)
    path.parent.mkdir(parents=True, exist_ok=True)
    seg.save_as(path, enforce_file_format=True)
    return path


def _segmentation(sources: list[Dataset], frames: np.ndarray, descriptions: list[hd.seg.SegmentDescription],
                  series_uid: str, model_description: str) -> hd.seg.Segmentation:
    return hd.seg.Segmentation(
        source_images=sources, pixel_array=frames,
        segmentation_type=hd.seg.SegmentationTypeValues.BINARY, segment_descriptions=descriptions,
        series_instance_uid=series_uid, series_number=SEG_SERIES_NUMBER, sop_instance_uid=generate_uid(),
        instance_number=1, manufacturer="hospital-fl", manufacturer_model_name="site_agent brats-inference",
        software_versions=AGENT_VERSION, device_serial_number="none", series_description=SEG_SERIES_DESCRIPTION,
        content_label="BRATS", content_description=f"tumour sub-regions by {model_description}"[:64])
