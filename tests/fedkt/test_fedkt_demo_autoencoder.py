"""The demo autoencoder command: a folder every code path loads like a published checkpoint, R from public images."""

from __future__ import annotations

import json

import pytest
import torch

from fl_contract.models.dcae import CLIP_NORM_FILE, load_autoencoder
from server_app.server_config import ServerConfig, ServerConfigError, write_server_config
from site_agent.cli import main
from site_agent.fedkt.demo_autoencoder import median_latent_norm, public_images


def test_command_saves_a_loadable_autoencoder_with_r_the_median_public_latent_norm(tmp_path):
    code = main(["fedkt", "train-demo-autoencoder", "--out", str(tmp_path / "demo-ae"), "--images", "16",
                 "--steps", "2", "--batch-size", "4"])

    loaded = load_autoencoder(tmp_path / "demo-ae")
    record = json.loads((tmp_path / "demo-ae" / CLIP_NORM_FILE).read_text())
    assert code == 0
    assert loaded.clip_norm == record["clip_norm"]
    assert loaded.clip_norm == median_latent_norm(loaded.model, public_images(16))
    assert "median latent norm of 16 public synthetic" in record["provenance"]


def test_public_images_are_fixed_by_their_seed_and_in_unit_range():
    first, second = public_images(4), public_images(4)

    assert first.shape == (4, 3, 64, 64)
    assert torch.equal(first, second)
    assert 0.0 <= float(first.min()) and float(first.max()) <= 1.0


def test_server_config_names_the_file_and_the_missing_model(tmp_path):
    path = write_server_config(tmp_path, {"dcae": str(tmp_path)})

    config = ServerConfig.load(path)

    assert config.model_dir("dcae") == tmp_path
    with pytest.raises(ServerConfigError, match=f'{path}: no model "other" configured'):
        config.model_dir("other")
