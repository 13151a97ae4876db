"""The segmentation data path that keeps a GPU fed, on the CPU: cases read once (in memory or on disk), random
transforms after the cache, loader workers and the prefetching thread, the memory check at task start."""

from __future__ import annotations

import pytest
import torch
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType

import site_agent.data.brats_case as brats_case
from fl_contract.models import build_model, state_dict_to_numpy
from fl_contract.models.segmentation import segresnet
from fl_contract.precision import choose_precision
from fl_contract.segmentation import VAL
from jobs.segmentation.spec import CPU_DEMO, KIND, SegmentationParams
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.kit.site_config import ComputeSettings, SiteConfig
from site_agent.segmentation.data import load_site_data
from site_agent.segmentation.memory import (
    GIB,
    GpuMemoryError,
    MemoryEstimate,
    check_training_memory,
    estimate_training_memory,
)
from site_agent.tasks.executor import SiteContext
from tests.support import recipe

ROI = (8, 8, 8)


@pytest.fixture
def reads(monkeypatch):
    """Every image or label file (or DICOM series folder) the site reads, in order."""
    seen = []
    real = brats_case.read_volume

    def counting(path):
        seen.append(path)
        return real(path)

    monkeypatch.setattr(brats_case, "read_volume", counting)
    return seen


def _batches(loader):
    return [(b["image"].clone(), b["label"].clone()) for b in loader]


@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "disk"])
def test_epochs_after_the_first_read_no_case_file(tmp_path, reads, on_disk):
    write_brats_site(tmp_path / "site", 1, n_cases=4, shape=(12, 12, 12), layout="nifti")
    data = load_site_data(tmp_path / "site", recipe(ROI, val_fraction=0.25),
                          cache_dir=tmp_path / "cache" if on_disk else None)
    assert len(reads) == 4 * 5  # four modalities and a label per case, read once while the cache fills

    first = _batches(data.train_loader(2, seed=0))
    (tmp_path / "site").rename(tmp_path / "moved")  # nothing left to read
    second = _batches(data.train_loader(2, seed=1))
    scored = list(data.eval_loader(VAL))

    assert len(reads) == 20
    assert len(first) == len(second) == 2 and len(scored) == 1
    assert second[0][0].shape == (2, 4, *ROI)
    assert not torch.equal(first[0][0], second[0][0])  # the random crop and jitter run after the cache, every epoch


def test_the_disk_cache_serves_the_next_job_and_rereads_a_changed_case(tmp_path, reads):
    cases = write_brats_site(tmp_path / "site", 1, n_cases=3, shape=(12, 12, 12), layout="nifti")
    memory = load_site_data(tmp_path / "site", recipe(ROI, val_fraction=0.34))
    disk = load_site_data(tmp_path / "site", recipe(ROI, val_fraction=0.34), cache_dir=tmp_path / "cache")
    reads.clear()

    again = load_site_data(tmp_path / "site", recipe(ROI, val_fraction=0.34), cache_dir=tmp_path / "cache")
    assert reads == []
    changed = cases[0].images[0]
    changed.write_bytes(changed.read_bytes())  # re-exported: same bytes, new modification time
    load_site_data(tmp_path / "site", recipe(ROI, val_fraction=0.34), cache_dir=tmp_path / "cache")

    assert len(reads) == 5 and reads[0] == changed
    for cached in (disk, again):
        item, reference = cached.val[0], memory.val[0]
        assert torch.equal(item["image"], reference["image"]) and torch.equal(item["label"], reference["label"])
        assert torch.equal(item["image"].affine, reference["image"].affine)  # HD95 needs the voxel spacing
    assert _equal(_batches(disk.train_loader(1, seed=5)), _batches(memory.train_loader(1, seed=5)))
    assert oct((tmp_path / "cache").stat().st_mode & 0o777) == "0o700"


def test_loader_workers_and_the_prefetching_thread_give_batches_fixed_by_the_seed(tmp_path):
    write_brats_site(tmp_path, 1, n_cases=5, shape=(12, 12, 12), layout="nifti")
    data = load_site_data(tmp_path, recipe(ROI, val_fraction=0.2))

    plain = _batches(data.train_loader(2, seed=3))
    threaded = _batches(data.train_loader(2, seed=3, prefetch=True))
    workers = _batches(data.train_loader(2, seed=3, workers=2))
    workers_again = _batches(data.train_loader(2, seed=3, workers=2, prefetch=True))

    assert _equal(threaded, plain)  # the thread changes when a batch is made, not what it holds
    assert _equal(workers_again, workers) and len(workers) == len(plain) == 2


def _equal(a, b):
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))


def test_the_memory_check_names_the_setting_to_lower():
    estimate = MemoryEstimate(fixed=1 * GIB, per_voxel=1000.0)
    roi = [224, 224, 144]
    one_case = 1000.0 * 224 * 224 * 144  # about 6.7 GiB

    assert check_training_memory(estimate, 2, roi, free_bytes=16 * GIB) == GIB + int(2 * one_case)
    with pytest.raises(GpuMemoryError, match=r"batch_size 4 at roi_size \[224, 224, 144\] needs about 27\.9 GiB.*"
                                             r"16\.0 GiB free: lower the job's batch_size to 2"):
        check_training_memory(estimate, 4, roi, free_bytes=16 * GIB)
    with pytest.raises(GpuMemoryError,
                       match=r"set the job's batch_size to 1 and lower its roi_size to \[160, 160, 96\]"):
        check_training_memory(estimate, 1, roi, free_bytes=4 * GIB)


def test_the_memory_estimate_is_measured_from_the_network_and_its_precision():
    net = segresnet(init_filters=8, blocks_down=(1, 1, 1), blocks_up=(1, 1), dropout_prob=0.0)
    wider = segresnet(init_filters=16, blocks_down=(1, 1, 1), blocks_up=(1, 1), dropout_prob=0.0)

    full = estimate_training_memory(net, 3, choose_precision("cpu"))
    half = estimate_training_memory(net, 3, choose_precision("cuda", (9, 0)))
    wide = estimate_training_memory(wider, 3, choose_precision("cpu"))

    assert 0.3 < half.per_voxel / full.per_voxel < 0.8  # 16-bit activations, float32 normalisation statistics
    assert 1.6 < wide.per_voxel / full.per_voxel < 2.4  # twice the channels at every level
    assert full.fixed > 4 * 4 * sum(p.numel() for p in net.parameters())  # weights, gradients, Adam's two moments


def test_the_site_task_takes_its_cache_and_workers_from_the_site_config_not_the_job(tmp_path):
    write_brats_site(tmp_path / "brats", 1, n_cases=4, shape=(12, 12, 12), layout="nifti")
    task = KIND.site_task_component(SegmentationParams(**{**CPU_DEMO, "roi_size": ROI}, tracking=False)).instantiate()
    config = SiteConfig(tmp_path / "site_agent.json", {"brats": str(tmp_path / "brats")},
                        compute=ComputeSettings(loader_workers=1, data_cache="disk"))
    ctx = SiteContext("site-1", config, torch.device("cpu"), tmp_path / "workspace", Signal())
    torch.manual_seed(0)
    model = FLModel(params=state_dict_to_numpy(build_model("segresnet", **task.model_args)),
                    params_type=ParamsType.FULL, current_round=0, total_rounds=1)

    sent = task.task_train(model, ctx)

    cached = list((tmp_path / "workspace" / "data_cache" / "segmentation").rglob("*.pt"))
    assert len(cached) == 4 and sent.params and torch.isfinite(torch.tensor(sent.metrics["train_loss"]))
