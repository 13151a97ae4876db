"""A small demo DC-AE trained on public synthetic lesions, saved exactly like a published checkpoint.

The real federation uses a published DC-AE (e.g. dc-ae-f32c32-in-1.0) downloaded once. For demos and tests we
train the tiny AutoencoderDC (same (32, 2, 2) latent for 64x64 input, d = 128) for a few minutes on CPU, on
synthetic ISIC-style images drawn with a public seed that no demo site uses. Without regularisation a small
autoencoder's latents drift to huge norms (docs/algorithms.md#demo-autoencoder-latents), so the loss adds
`latent_weight` x mean(z^2). The clip norm R is the median latent norm on these public images, fixed before any
site data is seen and saved in clip_norm.json. How well it reconstructs, and what a classifier trained on its
reconstructions scores, is measured on held-out public images and saved beside it in quality.json, so that the
demo can say what caps its results, and refuse to call a synthetic set meaningful when the autoencoder fails the
quality gate (`passes_quality_gate`).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from diffusers import AutoencoderDC

from fl_contract.classes import PLAYERFL_CLASSES, TRAINING_CLASSES
from fl_contract.fedkt_csd.classifier import (
    BATCH_SIZE,
    CLASSIFIER,
    evaluate_classifier,
    train_classifier,
    training_budget,
)
from fl_contract.job_params.fedkt_csd import FedKTCSDParams
from fl_contract.models.dcae import (
    build_tiny_dcae,
    from_autoencoder_range,
    load_autoencoder,
    save_autoencoder,
    to_autoencoder_range,
)
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.data.isic import read_isic_site
from site_agent.fedkt_csd.site_data import LabelledImages, read_images
from site_agent.fedkt_csd.stats import encode_latents

PUBLIC_SEED = 20_240_607  # the public image set; demo sites use small seeds
QUALITY_SEED = PUBLIC_SEED + 1  # held-out public images for quality.json, never trained on
PUBLIC_SKIN_TINTS = 32  # sites of the public set, each with its own skin tint
LATENT_WEIGHT = 1e-3
COLOUR_WEIGHT = 4.0
COLOUR_BLOCK = 8  # the colour term compares 8x8 block means: low frequencies, where colour shifts live
QUALITY_FILE = "quality.json"
# The recipe of the demo autoencoder the project ships (federation_tools/demos/demo_dcae, its quality.json says so):
# `site-agent fedkt train-demo-autoencoder` with these defaults makes it again.
TRAINING_IMAGES, TRAINING_STEPS, TRAINING_BATCH = 2048, 16_000, 16
EVALUATION_ROUND = FedKTCSDParams()  # the quality classifiers are the evaluation round's, with the job's defaults
# A classifier trained on smooth decoded images either transfers to the real ones or confuses two classes entirely,
# depending on its seed alone: one seed's score is not the autoencoder's, so the quality is a mean over seeds.
QUALITY_CLASSIFIER_SEEDS = 3
QUALITY_IMAGES = 768
QUALITY_GATE = 0.9  # the reconstruction classifier must keep this share of the real-image classifier's score


def public_set(n_images: int, classes: Sequence[str] = TRAINING_CLASSES, image_size: int = 64,
               seed: int = PUBLIC_SEED) -> LabelledImages:
    """N synthetic lesions of `classes` with their labels, images (N, 3, S, S) in [0, 1], from a public seed.

    The generator gives each site one skin tint; drawn as a single site, the autoencoder learns that tint as a
    constant and repaints every other site's skin in it (the old demo autoencoder's colour shift). So the images
    come from up to PUBLIC_SKIN_TINTS sites.
    """
    sites = max(1, min(PUBLIC_SKIN_TINTS, n_images))
    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        for site in range(1, sites + 1):
            count = n_images // sites + (site <= n_images % sites)
            folder = write_isic_site(Path(tmp) / str(site), site, sites, count, classes, alpha=100.0,
                                     size=image_size, seed=seed)
            parts.append(read_images(read_isic_site(folder, classes), image_size))
    return LabelledImages(torch.cat([p.images for p in parts]), torch.cat([p.labels for p in parts]))


def public_images(n_images: int, image_size: int = 64, seed: int = PUBLIC_SEED) -> torch.Tensor:
    """(N, 3, S, S) synthetic lesions of all eight training classes, in [0, 1], from the public seed."""
    return public_set(n_images, TRAINING_CLASSES, image_size, seed).images


def train_autoencoder(images: torch.Tensor, steps: int, batch_size: int = 16, learning_rate: float = 3e-3,
                      latent_weight: float = LATENT_WEIGHT, colour_weight: float = COLOUR_WEIGHT,
                      seed: int = 0) -> AutoencoderDC:
    """Adam on reconstruction MSE + `colour_weight` * MSE of 8x8 block means + `latent_weight` * mean(z^2).

    The block-mean term weighs low-frequency (colour, lesion outline) errors more than pixel noise. The learning
    rate warms up over the first 5% of the steps, then follows a cosine to zero. Images in [0, 1]; returns the
    model in eval mode.
    """
    model = build_tiny_dcae(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) * 0.5 * (1.0 + math.cos(math.pi * step / steps)))
    generator = torch.Generator().manual_seed(seed)
    x_all = to_autoencoder_range(images)
    model.train()
    for _ in range(steps):
        x = x_all[torch.randint(len(x_all), (batch_size,), generator=generator)]
        z = model.encode(x).latent
        y = model.decode(z).sample
        colour = torch.nn.functional.mse_loss(_block_means(y), _block_means(x))
        loss = torch.nn.functional.mse_loss(y, x) + colour_weight * colour + latent_weight * z.square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    return model.eval()


def _block_means(images: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.avg_pool2d(images, min(COLOUR_BLOCK, images.shape[-1]))


def median_latent_norm(model: AutoencoderDC, images: torch.Tensor) -> float:
    """The clip norm R: median L2 norm of the latents of public images in [0, 1]."""
    return float(encode_latents(model, to_autoencoder_range(images)).norm(dim=1).median())


def reconstruct(model: AutoencoderDC, images: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
    """decode(encode(x)) of images in [0, 1], back in [0, 1]."""
    with torch.inference_mode():
        return torch.cat([from_autoencoder_range(model.decode(model.encode(to_autoencoder_range(b)).latent).sample)
                          for b in images.split(batch_size)])


def psnr_db(reconstructions: torch.Tensor, images: torch.Tensor) -> float:
    """10 log10(1 / MSE) over the whole set, pixel values in [0, 1]."""
    return 10.0 * math.log10(1.0 / float((reconstructions.double() - images.double()).square().mean()))


def held_out_split(n_images: int = QUALITY_IMAGES, seed: int = 0) -> tuple[tuple[torch.Tensor, torch.Tensor],
                                                                            tuple[torch.Tensor, torch.Tensor]]:
    """`measure_quality`'s held-out public images of the demo's classes: (train images, labels), (test images,
    labels); two thirds train the classifiers, one third tests."""
    data = public_set(n_images, list(PLAYERFL_CLASSES), seed=QUALITY_SEED)
    order = torch.randperm(len(data.labels), generator=torch.Generator().manual_seed(seed))
    train, test = order[:2 * n_images // 3], order[2 * n_images // 3:]
    return (data.images[train], data.labels[train]), (data.images[test], data.labels[test])


def measure_quality(model: AutoencoderDC, n_images: int = QUALITY_IMAGES,
                    classifier_min_steps: int = EVALUATION_ROUND.classifier_min_steps, seed: int = 0,
                    classifier_seeds: int = QUALITY_CLASSIFIER_SEEDS) -> dict[str, Any]:
    """The autoencoder's quality on held-out public images of the demo's classes (QUALITY_SEED, never trained on).

    Two thirds of `n_images` train the classifiers, one third tests. PSNR of the test images' reconstructions, and
    the balanced accuracy on the real test images of the evaluation round's classifier trained on the train images'
    reconstructions, next to the same classifier trained on the real train images: the gap is what the autoencoder
    alone costs the downstream task. Each is the mean over `classifier_seeds` classifier seeds (seed, seed + 1, ...).
    Deterministic on CPU, so a test can recompute it from the saved folder.
    """
    classes = list(PLAYERFL_CLASSES)
    (x_train, y_train), (x_test, y_test) = held_out_split(n_images, seed)
    train_images = len(y_train)
    epochs, noise = EVALUATION_ROUND.classifier_epochs, EVALUATION_ROUND.classifier_noise
    budget = training_budget(train_images, epochs, classifier_min_steps, BATCH_SIZE)
    seeds = [seed + k for k in range(classifier_seeds)]
    scores: dict[str, list[float]] = {}
    for name, images in (("real", x_train), ("reconstructions", reconstruct(model, x_train))):
        scores[name] = [evaluate_classifier(train_classifier(images, y_train, len(classes), epochs, s,
                                                             min_steps=classifier_min_steps, noise_std=noise),
                                            x_test, y_test)["balanced_accuracy"] for s in seeds]
    return {
        "psnr_db": psnr_db(reconstruct(model, x_test), x_test),
        "balanced_accuracy_reconstructions": sum(scores["reconstructions"]) / len(seeds),
        "balanced_accuracy_real": sum(scores["real"]) / len(seeds),
        "per_classifier_seed": {"reconstructions": scores["reconstructions"], "real": scores["real"]},
        "gate": QUALITY_GATE,
        "held_out": {"seed": QUALITY_SEED, "classes": classes, "train_images": train_images,
                     "test_images": n_images - train_images, "image_size": int(x_test.shape[-1]), "split_seed": seed},
        "classifier": {"name": CLASSIFIER, "epochs": budget.epochs, "steps": budget.steps, "noise_std": noise,
                       "seeds": seeds},
        "about": "psnr_db: 10 log10(1/MSE) of the test images' reconstructions, pixels in [0, 1]; balanced_accuracy_*: "
                 "the evaluation round's classifier trained on the train images' reconstructions (or on the real "
                 "train images) and scored on the real test images, mean over the classifier seeds; all held-out "
                 "public synthetic images; gate: the share of the real-image score the reconstructions must keep",
    }


def passes_quality_gate(quality: dict[str, Any]) -> bool:
    """Whether a classifier trained on the autoencoder's reconstructions keeps at least QUALITY_GATE of the score of
    one trained on the real images: below it, the decoded images have lost the class evidence a synthetic set needs."""
    return bool(quality["balanced_accuracy_reconstructions"] >= QUALITY_GATE * quality["balanced_accuracy_real"])


def read_quality(folder: Path) -> dict[str, Any] | None:
    """quality.json of an autoencoder folder, or None where it has none (a published checkpoint)."""
    path = Path(folder) / QUALITY_FILE
    quality: dict[str, Any] | None = json.loads(path.read_text()) if path.is_file() else None
    return quality


def describe_quality(quality: dict[str, Any] | None) -> str:
    """For people: the stored PSNR and classifier scores and the gate's verdict, or that none were stored."""
    if quality is None:
        return f"autoencoder quality: not measured (no {QUALITY_FILE})"
    held_out = quality["held_out"]
    line = (f"autoencoder quality on {held_out['test_images']} held-out public synthetic images: reconstruction PSNR "
            f"{quality['psnr_db']:.1f} dB; a classifier trained on {held_out['train_images']} reconstructions scores "
            f"balanced accuracy {quality['balanced_accuracy_reconstructions']:.3f} on real images "
            f"({quality['balanced_accuracy_real']:.3f} trained on the real images)")
    if passes_quality_gate(quality):
        return f"{line}: passes the quality gate (at least {QUALITY_GATE:.0%} of the real-image score)"
    return (f"{line}.\nTHE AUTOENCODER IS TOO WEAK FOR A MEANINGFUL SYNTHETIC SET: its reconstructions keep less than "
            f"{QUALITY_GATE:.0%} of the real-image score, so a classifier trained on the images it decodes learns "
            f"little about real ones. Use a published DC-AE, or the demo one this project ships.")


def train_demo_autoencoder(out: Path, n_images: int = TRAINING_IMAGES, steps: int = TRAINING_STEPS,
                           batch_size: int = TRAINING_BATCH, seed: int = 0, quality_images: int = QUALITY_IMAGES,
                           classifier_min_steps: int = EVALUATION_ROUND.classifier_min_steps) -> Path:
    """Train on `n_images` public images, then `save_demo_autoencoder`."""
    started = time.monotonic()
    model = train_autoencoder(public_images(n_images), steps, batch_size, seed=seed)
    recipe = {"images": n_images, "steps": steps, "batch_size": batch_size, "seed": seed,
              "seconds": round(time.monotonic() - started)}
    return save_demo_autoencoder(model, out, recipe, quality_images, classifier_min_steps)


def save_demo_autoencoder(model: AutoencoderDC, out: Path, recipe: dict[str, Any], quality_images: int = QUALITY_IMAGES,
                          classifier_min_steps: int = EVALUATION_ROUND.classifier_min_steps) -> Path:
    """Fix R from the public images `recipe` trained on, measure the quality, and save `out` (config.json, safetensors
    weights, clip_norm.json, quality.json whose `training` is `recipe`: images, steps, batch_size, seed, seconds)."""
    clip_norm = median_latent_norm(model, public_images(recipe["images"]))
    provenance = (f"median latent norm of {recipe['images']} public synthetic ISIC-style images (seed {PUBLIC_SEED}), "
                  f"64x64 in [-1, 1]; tiny AutoencoderDC trained {recipe['steps']} steps "
                  f"(batch {recipe['batch_size']}, latent weight {LATENT_WEIGHT}, colour weight {COLOUR_WEIGHT}, "
                  f"seed {recipe['seed']}) in {recipe['seconds']} s")
    folder = save_autoencoder(model, Path(out), clip_norm, provenance)
    quality = measure_quality(load_autoencoder(folder).model, quality_images, classifier_min_steps, recipe["seed"])
    quality["training"] = recipe
    (folder / QUALITY_FILE).write_text(json.dumps(quality, indent=2))
    return folder
