"""The privacy officer's export: the exact vector the job sends before masking, a readable summary, and its reuse."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel
from support import FedKTRelay

from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.fedkt_csd import protocol
from fl_contract.fedkt_csd.wire import RING_DTYPE
from fl_contract.models.dcae import build_tiny_dcae, load_autoencoder, save_autoencoder
from jobs.fedkt_csd.spec import KIND, FedKTCSDParams
from site_agent.cli import main
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.fedkt_csd.export import METADATA_FILE, PAYLOAD_FILE, SUMMARY_FILE, ExportSettings, read_export
from site_agent.fedkt_csd.site_data import statistics_vector
from site_agent.kit.site_config import SiteConfig, write_site_config
from site_agent.tasks.executor import SiteContext

CLASSES = list(PLAYERFL_CLASSES)
SETTINGS = ExportSettings(CLASSES, 64, 0.2, 0)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A site kit whose config maps isic, dcae and the reviewed export folder; the export written by the CLI."""
    root = tmp_path_factory.mktemp("export")
    ae = save_autoencoder(build_tiny_dcae(0), root / "tiny-dcae", clip_norm=40.0, provenance="public set, median")
    data = write_isic_site(root / "isic", 2, 3, 16, alpha=10.0)
    kit = root / "site-2"
    write_site_config(kit, {"isic": str(data), "dcae": str(ae), "fedkt_reviewed": str(root / "reviewed")})
    assert main(["fedkt", "export", "--kit", str(kit), "--out", str(root / "reviewed")]) == 0
    return kit, root / "reviewed"


def test_export_holds_the_unmasked_job_vector_and_a_summary_naming_what_is_sent(site):
    kit, folder = site
    config = SiteConfig.for_kit(kit)
    loaded = load_autoencoder(config.data_dir("dcae", "site-2"))

    expected = statistics_vector(loaded, config.data_dir("isic", "site-2"), CLASSES, 64, 0.2, 0)

    metadata = json.loads((folder / METADATA_FILE).read_text())
    text = (folder / SUMMARY_FILE).read_text()
    np.testing.assert_array_equal(np.fromfile(folder / PAYLOAD_FILE, dtype=RING_DTYPE), expected)
    assert metadata["bytes"] == expected.nbytes == 4 * 8385 * 8 and metadata["dim"] == 128
    assert sum(metadata["counts"].values()) == 13  # 16 images, 3 held out
    for fact in ("BCC", "latent size d: 128", "clip norm R: 40.0 (public set, median)", f"{expected.nbytes} bytes",
                 loaded.identity.weights_sha256, metadata["payload_sha256"], "tiny-dcae"):
        assert fact in text


def test_job_sends_the_reviewed_vector_masked(site):
    kit, folder = site
    config = SiteConfig.for_kit(kit)
    sites = ["site-1", "site-2", "site-3"]  # three sites of the same kit, each sending the reviewed file
    contexts = {name: SiteContext(name, config, torch.device("cpu"), kit, Signal()) for name in sites}
    params = FedKTCSDParams(classes=CLASSES, reviewed_statistics="fedkt_reviewed")
    relay = FedKTRelay({name: KIND.site_task_component(params).instantiate() for name in sites}, contexts)
    identity = load_autoencoder(config.data_dir("dcae", "site-2")).identity

    total = relay.secure_sum(FLModel(params={}, meta=protocol.announcement("s", CLASSES, 64, identity)))

    reviewed = np.fromfile(folder / PAYLOAD_FILE, dtype=RING_DTYPE)
    np.testing.assert_array_equal(total, reviewed * np.uint64(3))
    assert not np.array_equal(relay.sent["statistics"]["site-2"].params["masked"], reviewed)


def test_changed_or_mismatched_export_is_refused(site, tmp_path):
    kit, folder = site
    identity = load_autoencoder(SiteConfig.for_kit(kit).data_dir("dcae", "site-2")).identity
    changed = tmp_path / "changed"
    changed.mkdir()
    for name in (PAYLOAD_FILE, METADATA_FILE):
        (changed / name).write_bytes((folder / name).read_bytes())
    data = bytearray((changed / PAYLOAD_FILE).read_bytes())
    data[0] ^= 1
    (changed / PAYLOAD_FILE).write_bytes(bytes(data))

    with pytest.raises(ValueError, match="fedkt_statistics.u64: sha256 differs.*changed after review"):
        read_export(changed, SETTINGS, identity)
    with pytest.raises(ValueError, match="does not fit this job: holdout_fraction is 0.2, the job needs 0.3"):
        read_export(folder, ExportSettings(CLASSES, 64, 0.3, 0), identity)
