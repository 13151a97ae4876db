"""Loading the frozen DC-AE from a local folder only, with its clip norm and identity."""

import hashlib
import json

import pytest
import torch

from fl_contract.models.dcae import (
    CLIP_NORM_FILE,
    WEIGHTS_FILE,
    build_tiny_dcae,
    from_autoencoder_range,
    latent_shape,
    load_autoencoder,
    save_autoencoder,
    to_autoencoder_range,
)


def test_tiny_autoencoder_round_trips_through_save_and_load(tmp_path):
    model = build_tiny_dcae(seed=0)
    folder = save_autoencoder(model, tmp_path / "tiny-dcae", clip_norm=3.5, provenance="median latent norm, public set")
    x = to_autoencoder_range(torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)))

    loaded = load_autoencoder(folder)

    with torch.inference_mode():
        latent = loaded.model.encode(x).latent
        expected = model.eval().encode(x).latent
    assert latent.shape == (2, 32, 2, 2)
    assert latent_shape(loaded.model, 64) == (32, 2, 2)
    torch.testing.assert_close(latent, expected)
    assert not loaded.model.training
    assert not any(p.requires_grad for p in loaded.model.parameters())
    assert loaded.clip_norm == 3.5
    assert loaded.identity.name == "tiny-dcae"
    assert loaded.identity.weights_sha256 == hashlib.sha256((folder / WEIGHTS_FILE).read_bytes()).hexdigest()
    assert loaded.identity.clip_norm_provenance == "median latent norm, public set"


def test_tiny_autoencoder_is_small_and_seeded():
    first, second = build_tiny_dcae(seed=1), build_tiny_dcae(seed=1)

    n_params = sum(p.numel() for p in first.parameters())

    assert 150_000 < n_params < 250_000
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters()))


def test_hub_id_is_refused_without_download():
    with pytest.raises(FileNotFoundError, match="not a local folder.*never downloads"):
        load_autoencoder("mit-han-lab/dc-ae-f32c32-in-1.0-diffusers")


@pytest.mark.parametrize("missing", ["config.json", WEIGHTS_FILE, CLIP_NORM_FILE])
def test_incomplete_folder_is_refused_naming_the_missing_file(tmp_path, missing):
    folder = save_autoencoder(build_tiny_dcae(), tmp_path / "ae", clip_norm=1.0, provenance="test")
    (folder / missing).unlink()

    with pytest.raises(FileNotFoundError, match=f"lacks {missing}"):
        load_autoencoder(folder)


def test_invalid_clip_norm_is_refused(tmp_path):
    folder = save_autoencoder(build_tiny_dcae(), tmp_path / "ae", clip_norm=1.0, provenance="test")
    (folder / CLIP_NORM_FILE).write_text(json.dumps({"clip_norm": -1, "provenance": "test"}))

    with pytest.raises(ValueError, match="finite positive"):
        load_autoencoder(folder)


def test_range_maps_are_inverse_and_clamp():
    images = torch.tensor([0.0, 0.25, 1.0])

    back = from_autoencoder_range(to_autoencoder_range(images))

    torch.testing.assert_close(back, images)
    torch.testing.assert_close(from_autoencoder_range(torch.tensor([-3.0, 3.0])), torch.tensor([0.0, 1.0]))
