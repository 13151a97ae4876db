"""The inference job: label maps as NIfTI on the case's grid and DICOM SEGs that read back onto the source series
(pydicom and highdicom), and one run in FLARE's simulator that sends back nothing but counts and timings."""

from __future__ import annotations

import json
from pathlib import Path

import highdicom as hd
import nibabel as nib
import numpy as np
import pydicom
import pytest
import torch

from federation_tools.simulate import simulate
from fl_contract.job_params.segmentation import SlidingWindow
from fl_contract.labels import BRATS_2021, LabelMap
from fl_contract.models import build_model
from fl_contract.params import params_to_json
from fl_contract.segmentation import INFERENCE_KEYS
from jobs.common import build_job, export
from jobs.inference.spec import KIND, InferenceParams
from jobs.segmentation.spec import CPU_DEMO
from site_agent.data.brats_case import DEFAULT_DICOM_FOLDERS, REFERENCE_MODALITY, read_case
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.data.dicom_seg import brats_segments, write_dicom_seg
from site_agent.data.readers.dicom_series import series_slices
from site_agent.segmentation.inference import segment_cases
from tests.support import recipe

ARCHITECTURE = {k: CPU_DEMO[k] for k in ("init_filters", "blocks_down", "blocks_up", "dropout_prob")}
SHAPE = (16, 12, 8)


def _seg_label_map(seg_path: Path, source: Path, label_map: LabelMap) -> np.ndarray:
    """The SEG read back with highdicom onto the source series' slices, as an (X, Y, Z) label map."""
    seg = hd.seg.segread(seg_path)
    uids = [ds.SOPInstanceUID for ds in series_slices(source)]
    numbers = seg.get_pixels_by_source_instance(uids, combine_segments=True, skip_overlap_checks=True)
    labels = np.zeros(numbers.shape, np.uint8)
    for value, segment in brats_segments(label_map).items():
        labels[numbers == segment.number] = value
    return labels.transpose(2, 1, 0)


def test_dicom_seg_lies_on_the_source_series_and_matches_the_label_map_frame_by_frame(tmp_path):
    case = write_brats_site(tmp_path / "site", 1, n_cases=1, shape=SHAPE, layout="dicom")[0]
    _, label = read_case(case)
    labels = label.array[0].astype(np.uint8)
    source = case.images[1]
    assert source.name == DEFAULT_DICOM_FOLDERS[REFERENCE_MODALITY]

    path = write_dicom_seg(labels, BRATS_2021, source, tmp_path / "case.seg.dcm", "test model")

    seg, slices = pydicom.dcmread(path), series_slices(source)
    assert seg.Modality == "SEG" and seg.SegmentationType == "BINARY"
    assert seg.FrameOfReferenceUID == slices[0].FrameOfReferenceUID
    assert seg.StudyInstanceUID == slices[0].StudyInstanceUID and seg.PatientID == slices[0].PatientID
    assert seg.ReferencedSeriesSequence[0].SeriesInstanceUID == slices[0].SeriesInstanceUID
    assert [s.SegmentLabel for s in seg.SegmentSequence] == [
        "Necrotic tumour core", "Peritumoral edema", "Enhancing tumour"
    ]
    by_uid = {ds.SOPInstanceUID: k for k, ds in enumerate(slices)}
    numbers = {s.number: v for v, s in brats_segments(BRATS_2021).items()}
    for frame, pixels in zip(seg.PerFrameFunctionalGroupsSequence, seg.pixel_array):  # pydicom alone, frame by frame
        k = by_uid[frame.DerivationImageSequence[0].SourceImageSequence[0].ReferencedSOPInstanceUID]
        value = numbers[frame.SegmentIdentificationSequence[0].ReferencedSegmentNumber]
        np.testing.assert_array_equal(pixels.astype(bool), labels[:, :, k].T == value)
        np.testing.assert_allclose(frame.PlanePositionSequence[0].ImagePositionPatient, slices[k].ImagePositionPatient)
    np.testing.assert_array_equal(_seg_label_map(path, source, BRATS_2021), labels)  # and through highdicom


def test_segment_cases_writes_a_nifti_on_the_case_grid_and_a_seg_for_dicom_cases(tmp_path):
    dicom = write_brats_site(tmp_path / "dicom", 1, n_cases=1, shape=SHAPE, layout="dicom")
    nifti = write_brats_site(tmp_path / "nifti", 2, n_cases=1, shape=SHAPE, layout="nifti")
    torch.manual_seed(0)
    net = build_model("segresnet", **ARCHITECTURE)

    window = SlidingWindow((16, 12, 8), 1, 0.5)
    outputs = segment_cases(net, dicom + nifti, tmp_path / "out", window, torch.device("cpu"), BRATS_2021, "m")

    assert [o.case_id for o in outputs] == ["Site1_000", "Site2_000"]
    assert outputs[0].dicom_seg is not None and outputs[1].dicom_seg is None
    for output, case in zip(outputs, dicom + nifti):
        image, _ = read_case(case)
        written = nib.load(output.nifti)
        np.testing.assert_allclose(written.affine, image.affine, atol=1e-5)
        assert written.shape == SHAPE and set(np.unique(np.asarray(written.dataobj))) <= {0, 1, 2, 4}
    np.testing.assert_array_equal(_seg_label_map(outputs[0].dicom_seg, dicom[0].images[1], BRATS_2021),
                                  np.asarray(nib.load(outputs[0].nifti).dataobj))


@pytest.mark.simulator
def test_inference_job_in_the_simulator_writes_at_the_sites_and_sends_only_counts_and_timings(tmp_path):
    models = tmp_path / "server-models" / "run-7"
    models.mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(build_model("segresnet", **ARCHITECTURE).state_dict(), models / "best_global_model.pt")
    for index, site in enumerate(("site-1", "site-2"), start=1):
        write_brats_site(tmp_path / site / "cases", index, n_cases=2, shape=SHAPE, layout="dicom")
        (tmp_path / site / "results").mkdir()
    params = InferenceParams(model="run-7", roi_size=(16, 12, 8), min_clients=2, **ARCHITECTURE)
    job_dir = export(build_job(KIND, params), tmp_path / "job")

    run = simulate(job_dir, tmp_path / "ws", ["site-1", "site-2"],
                   {"brats_inference": str(tmp_path / "{site_name}" / "cases"),
                    "brats_results": str(tmp_path / "{site_name}" / "results")},
                   server_models={"run-7": str(models)}, timeout=300)

    results = json.loads((run.server_app_dir / "results.json").read_text())
    assert not run.aborted() and results["status"] == "finished", run.server_log.read_text()[-3000:]
    assert results["no_result"] == []
    assert results["job"] == {"workflow": "inference", **params_to_json(params), "network": "segresnet",
                              "model_args": params.model_args()}  # every parameter, as for the other kinds
    for site in ("site-1", "site-2"):
        sent = results["sites"][site]
        assert set(sent) == set(INFERENCE_KEYS), sent
        assert sent["cases_segmented"] == 2 and sent["dicom_segs_written"] == 2
        written = sorted(p.name for p in (tmp_path / site / "results" / "simulate_job").iterdir())
        case_ids = [f"Site{site[-1]}_00{i}" for i in range(2)]
        assert written == sorted([f"{c}.nii.gz" for c in case_ids] + [f"{c}.seg.dcm" for c in case_ids])
        assert not any(c in json.dumps(results) for c in case_ids)
    print(f"inference: {results['sites']}")


def test_site_agent_check_accepts_a_folder_of_unlabelled_cases(tmp_path):
    from site_agent.data.inspection import inspect_folder

    for case in write_brats_site(tmp_path, 1, n_cases=2, shape=SHAPE, layout="dicom"):
        case.label.unlink()
    (tmp_path / "datalist.json").unlink()

    found = inspect_folder(tmp_path, deep=True)

    assert found is not None and found.problems == []
    assert found.summary.startswith("0 labelled cases, 2 without labels")


def test_a_site_that_requires_dp_on_weights_admits_inference_and_charges_it_nothing():
    import dataclasses

    from fl_contract.job_privacy import COUNTS, SitePrivacy, release_of
    from jobs.spec import import_class
    from site_agent.privacy.accounting import job_spend
    from site_agent.privacy.policy import SitePolicy, privacy_refusal

    params = InferenceParams()
    privacy = SitePrivacy.declare(KIND.name, release_of(import_class(KIND.site_task)), dataclasses.asdict(params))
    policy = SitePolicy(allowed_job_kinds=(KIND.name,), min_dp_noise_multiplier=1.0)

    assert privacy.release == COUNTS and privacy_refusal(policy, privacy) == ""
    spend = job_spend(privacy)
    assert spend is not None and (spend.epsilon, spend.delta) == (0.0, 0.0)


def _anisotropic_lps_site(root: Path, n_cases: int) -> None:
    """Cases on 2 x 2 x 1.5 mm voxels with the first two axes flipped (LPS-like), unlike BraTS-preprocessed data."""
    from site_agent.data.brats_case import MODALITIES
    from site_agent.data.demo.synthetic_brats import synthetic_case
    from site_agent.data.readers.nifti import write_nifti

    affine = np.array([[-2.0, 0, 0, 10], [0, -2.0, 0, 12], [0, 0, 1.5, -6], [0, 0, 0, 1]])
    for index in range(n_cases):
        case = synthetic_case(1, index, shape=SHAPE)
        for c, modality in enumerate(MODALITIES):
            write_nifti(root / f"Case{index}" / f"Case{index}_{modality}.nii.gz", case.image[c], affine)
        write_nifti(root / f"Case{index}" / f"Case{index}_seg.nii.gz", case.label, affine)


def test_ras_1mm_resampling_feeds_the_network_ras_1mm_and_writes_back_on_the_cases_grid(tmp_path):
    from monai.data.utils import affine_to_spacing
    from nibabel.orientations import aff2axcodes

    from site_agent.segmentation.data import load_site_data

    _anisotropic_lps_site(tmp_path / "cases", 3)
    data = load_site_data(tmp_path / "cases", recipe((16, 16, 16), val_fraction=0.34, resample_ras_1mm=True))
    plain = load_site_data(tmp_path / "cases", recipe((16, 16, 16), val_fraction=0.34))
    item, original = data.val[0], plain.val[0]

    assert (aff2axcodes(item["image"].affine) == ("R", "A", "S")
            and aff2axcodes(original["image"].affine) == ("L", "P", "S"))
    np.testing.assert_allclose(affine_to_spacing(item["image"].affine, r=3), [1.0, 1.0, 1.0])
    # the same extent in 1 mm steps
    assert tuple(item["image"].shape[1:]) == tuple(item["label"].shape[1:]) == (31, 23, 12)
    torch.manual_seed(0)
    net = build_model("segresnet", **ARCHITECTURE)
    cases = list(data.split.val)

    (output,) = segment_cases(net, cases, tmp_path / "out", SlidingWindow((16, 16, 16), 1, 0.5), torch.device("cpu"),
                              BRATS_2021, "m", resample_ras_1mm=True)

    written = nib.load(output.nifti)
    image, _ = read_case(cases[0])
    assert written.shape == SHAPE and set(np.unique(np.asarray(written.dataobj))) <= {0, 1, 2, 4}
    np.testing.assert_allclose(written.affine, image.affine, atol=1e-5)
