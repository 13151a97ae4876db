"""FedKT-CSD one-shot job: sites send secure-aggregated DC-AE latent statistics, the server releases DP synthetic data.

Sites need an ISIC-format folder and the autoencoder folder under their dataset keys; the server needs the same
autoencoder folder in its local/server_app.json. `site-agent fedkt train-demo-autoencoder` makes one for demos.
See docs/fedkt-csd.md and docs/fedkt-csd-privacy.md.
"""

from __future__ import annotations

from fl_contract.job_params.fedkt_csd import FedKTCSDParams
from jobs.spec import JobKind

KIND = JobKind(
    name="fedkt-csd",
    summary="FedKT-CSD one-shot synthetic data: sites send secure-aggregated (masked) DC-AE latent statistics, the "
            "server releases DP class Gaussians and a synthetic image set",
    params=FedKTCSDParams,
    controller="server_app.fedkt_csd.FedKTCSDController",
    site_task="site_agent.tasks.fedkt_csd.FedKTCSDTask",
    dataset_keys=("dataset", "autoencoder", "reviewed_statistics"),
    resumable=False,  # one-shot: its key exchange and masks cannot outlive the run
    guide="docs/fedkt-csd.md",
)

__all__ = ["KIND", "FedKTCSDParams"]
