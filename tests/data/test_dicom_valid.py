"""The DICOM the agent writes is valid: dicom3tools' IOD validator `dciodvfy` finds no error in a demo MR slice of
any modality or in a DICOM SEG over a demo series (and the SEG carries its source's patient and study)."""

from __future__ import annotations

import shutil
import subprocess
import warnings
from pathlib import Path

import highdicom as hd
import numpy as np
import pydicom
import pytest

from fl_contract.labels import BRATS_2021
from site_agent.data.brats_case import DEFAULT_DICOM_FOLDERS, MODALITIES
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.data.dicom_seg import write_dicom_seg

DCIODVFY = shutil.which("dciodvfy")
pytestmark = pytest.mark.needs(None if DCIODVFY else "dciodvfy is not installed (Debian package dicom3tools: "
                               "`apt-get install -y dicom3tools`, which .ci/run does)", "DICOM validation")


def _errors(path: Path) -> list[str]:
    """dciodvfy's error lines for one file (it reports on stderr; warnings are not errors)."""
    run = subprocess.run([str(DCIODVFY), str(path)], capture_output=True, text=True, timeout=60, check=False)
    return [line for line in (run.stdout + run.stderr).splitlines() if line.startswith("Error")]


@pytest.fixture(scope="module")
def demo_case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    [case] = write_brats_site(tmp_path_factory.mktemp("demo"), 1, n_cases=1, shape=(16, 16, 12), seed=3)
    return case.images[0].parent


@pytest.mark.parametrize("modality", MODALITIES)
def test_demo_mr_slices_pass_dciodvfy(demo_case, modality):
    # Prepare
    slices = sorted((demo_case / DEFAULT_DICOM_FOLDERS[modality]).iterdir())

    # Execute
    errors = {path.name: _errors(path) for path in (slices[0], slices[len(slices) // 2], slices[-1])}

    # Assert
    assert errors == {name: [] for name in errors}


def test_a_dicom_seg_over_a_demo_series_passes_dciodvfy(demo_case, tmp_path):
    # Prepare
    source = demo_case / DEFAULT_DICOM_FOLDERS["t1ce"]
    labels = np.zeros((16, 16, 12), dtype=np.uint8)
    labels[4:10, 4:10, 3:8] = 2
    labels[5:8, 5:8, 4:6] = 4
    labels[6, 6, 5] = 1

    # Execute
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        path = write_dicom_seg(labels, BRATS_2021, source, tmp_path / "case.seg.dcm", "test model")

    # Assert
    assert _errors(path) == []
    seg, first = pydicom.dcmread(path), pydicom.dcmread(sorted(source.iterdir())[0])
    assert ((seg.StudyDate, seg.StudyTime, seg.StudyID) == (first.StudyDate, first.StudyTime, first.StudyID)
            != ("", "", ""))


def test_a_dicom_seg_over_an_enhanced_mr_file_passes_dciodvfy(demo_case, tmp_path):
    # Prepare: the T1ce series as one Legacy Converted Enhanced MR file (highdicom), as a PACS converts it
    source = demo_case / DEFAULT_DICOM_FOLDERS["t1ce"]
    converted = hd.legacy.LegacyConvertedEnhancedMRImage([pydicom.dcmread(p) for p in sorted(source.iterdir())],
                                                         series_instance_uid="1.2.3.9", series_number=9,
                                                         sop_instance_uid="1.2.3.9.1", instance_number=1)
    (tmp_path / "enhanced").mkdir()
    converted.save_as(tmp_path / "enhanced" / "enhanced.dcm")
    labels = np.zeros((16, 16, 12), dtype=np.uint8)
    labels[4:10, 4:10, 3:8] = 2

    # Execute
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        path = write_dicom_seg(labels, BRATS_2021, tmp_path / "enhanced", tmp_path / "case.seg.dcm", "test model")

    # Assert
    assert _errors(path) == []
