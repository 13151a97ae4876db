"""The privacy officer's export: exactly the statistics vector a FedKT-CSD job would send, before masking.

An export folder holds three files:

    fedkt_statistics.u64    the unmasked fixed-point vector (little-endian uint64, wire layout): the job adds
                            only the pairwise masks to it before sending
    fedkt_statistics.json   what the vector is: classes, counts, d, R, bytes, autoencoder identity, sha256 of the vector
    fedkt_statistics.txt    the same for people

A job run with `reviewed_statistics=<dataset key>` sends this reviewed vector instead of recomputing it, after
checking that it was made for the job's classes, autoencoder and split (`read_export`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fl_contract.fedkt_csd.wire import ring_fields
from fl_contract.models.dcae import AutoencoderIdentity
from fl_contract.ring import RING_DTYPE
from site_agent import __version__

PAYLOAD_FILE = "fedkt_statistics.u64"
METADATA_FILE = "fedkt_statistics.json"
SUMMARY_FILE = "fedkt_statistics.txt"
FORMAT = "fedkt-csd-statistics/v1"


@dataclass(frozen=True)
class ExportSettings:
    """The job parameters that decide the vector; a reviewed export is sent only if the job's are the same."""

    classes: list[str]
    image_size: int
    holdout_fraction: float
    seed: int


def payload_sha256(vector: np.ndarray) -> str:
    """The vector's fingerprint: in the export's metadata, and in the site's audit log when a job sends it masked."""
    return hashlib.sha256(vector.tobytes()).hexdigest()


def write_export(folder: Path, vector: np.ndarray, settings: ExportSettings, identity: AutoencoderIdentity) -> Path:
    """Write the vector, its metadata and the human-readable summary into `folder`; returns the summary's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sums, _, counts = ring_fields(vector, len(settings.classes))
    data = vector.tobytes()
    metadata = {
        "format": FORMAT, "site_agent_version": __version__, **asdict(settings),
        "counts": {name: int(n) for name, n in zip(settings.classes, counts)},
        "dim": sums.shape[1], "entries": int(vector.size), "bytes": len(data),
        "payload_sha256": payload_sha256(vector), "autoencoder": identity.manifest(),
    }
    (folder / PAYLOAD_FILE).write_bytes(data)
    (folder / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")
    (folder / SUMMARY_FILE).write_text(summary(metadata))
    return folder / SUMMARY_FILE


def summary(metadata: dict[str, Any]) -> str:
    """What a privacy officer reads before anything is sent."""
    ae = metadata["autoencoder"]
    counts = "\n".join(f"    {name:<6} {n:>7}" for name, n in metadata["counts"].items())
    return (
        "FedKT-CSD site statistics (the only data this site sends in a FedKT-CSD job)\n"
        f"  classes and record counts:\n{counts}\n"
        f"  latent size d: {metadata['dim']}; per class: sum of clipped latents (d), upper triangle of the sum of\n"
        f"    outer products (d(d+1)/2), count (1)\n"
        f"  clip norm R: {ae['clip_norm']} ({ae['clip_norm_provenance']})\n"
        f"  vector: {metadata['entries']} little-endian uint64 fixed-point values, {metadata['bytes']} bytes, "
        f"sha256 {metadata['payload_sha256']}\n"
        f"  encoder: {ae['name']}, weights sha256 {ae['weights_sha256']}\n"
        f"  images {metadata['image_size']}x{metadata['image_size']}, held out for evaluation: "
        f"{metadata['holdout_fraction']} (split seed {metadata['seed']})\n"
        "  The job adds pairwise secure-aggregation masks to this vector and sends nothing else: no image,\n"
        "  per-record latent, path, patient ID or model weight. Decode it with\n"
        "  fl_contract.fedkt_csd.wire.from_ring(vector, number_of_classes, R).\n"
    )


def read_export(folder: Path, settings: ExportSettings, identity: AutoencoderIdentity) -> np.ndarray:
    """The reviewed vector, refused (naming the file and field) unless it was made for these settings and encoder."""
    folder = Path(folder)
    meta_path, payload_path = folder / METADATA_FILE, folder / PAYLOAD_FILE
    for path in (meta_path, payload_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found; write the reviewed export with `site-agent fedkt export`")
    metadata = json.loads(meta_path.read_text())
    expected = {"format": FORMAT, **asdict(settings), "autoencoder": identity.manifest()}
    wrong = [f"{key} is {metadata.get(key)!r}, the job needs {value!r}" for key, value in expected.items()
             if metadata.get(key) != value]
    if wrong:
        raise ValueError(f"{meta_path}: the reviewed export does not fit this job: {'; '.join(wrong)}. "
                         "Export again with the job's parameters, review it, "
                         "or run the job without reviewed_statistics")
    data = payload_path.read_bytes()
    if hashlib.sha256(data).hexdigest() != metadata["payload_sha256"]:
        raise ValueError(f"{payload_path}: sha256 differs from the reviewed one in {meta_path}; the file changed "
                         "after review: export and review it again")
    vector = np.frombuffer(data, dtype=RING_DTYPE).copy()
    ring_fields(vector, len(settings.classes))  # refuses a vector of the wrong layout or range
    return vector

