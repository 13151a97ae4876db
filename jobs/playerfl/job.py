"""PLayer-FL and its baselines on four-class ISIC-format sites (ALGORITHMS.md, docs/playerfl.md).

Parameters:
    method           local, fedavg, fedprox, ditto, fedbabu, fedlp, playerfl (default), playerfl_random
    num_rounds       federation rounds, one local pass of `local_epochs` each (reference: 50-60)
    model            cnn5 (the paper's 5-conv CNN, default) or resnet10 (MONAI, batch norm)
    model_args       extra model arguments, e.g. {"channels": [8, 16, 32, 64, 128]} for a narrow CNN5
    image_size       images are resized to image_size x image_size (reference: 200)
    threshold        PLayer-FL's split threshold t on F_l / F_{l-1} (our default 1.5, see docs)
    batch_size, learning_rate, weight_decay, focal_gamma, local_epochs: local training (reference 128, 1e-3, 1e-4, 2, 1)
    fedprox_mu, ditto_lambda, fedlp_keep, finetune_epochs: the baselines' hyper-parameters (0.1, 0.1, 0.7, 1)
    min_clients      sites that must take part
    dataset          the dataset key sites map to their ISIC folder in site_agent.json (default "isic")
    seed             initial weights, data split, shuffling, FedLP draws, PLayer-FL-Random's split

Sites need an ISIC-2019-format folder (`site-agent demo-data isic` writes synthetic ones) under "isic".
"""

from __future__ import annotations

import argparse
import json

from nvflare.job_config.api import FedJob

from jobs.common import new_job
from server_app.playerfl import DEFAULT_THRESHOLD, PLayerFLController
from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.playerfl.protocol import METHODS
from site_agent.tasks.playerfl import PLayerFLTask

NAME = "playerfl"


def default_model_args(model: str, image_size: int) -> dict:
    """The classifier's arguments for four classes at `image_size` (CNN5's flattened size depends on it)."""
    args: dict = {"num_classes": len(PLAYERFL_CLASSES)}
    if model == "cnn5":
        args["in_size"] = image_size
    return args


def build_job(
    method: str = "playerfl",
    num_rounds: int = 50,
    model: str = "cnn5",
    model_args: dict | None = None,
    image_size: int = 200,
    threshold: float = DEFAULT_THRESHOLD,
    local_epochs: int = 1,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    weight_decay: float = 1e-4,
    focal_gamma: float = 2.0,
    fedprox_mu: float = 0.1,
    ditto_lambda: float = 0.1,
    fedlp_keep: float = 0.7,
    finetune_epochs: int = 1,
    min_clients: int = 2,
    dataset: str = "isic",
    seed: int = 0,
) -> FedJob:
    arguments = {**default_model_args(model, image_size), **(model_args or {})}
    job = new_job(f"{NAME}-{method.replace('_', '-')}", min_clients)
    job.to_server(PLayerFLController(num_rounds=num_rounds, model=model, model_args=arguments, method=method,
                                     threshold=threshold, min_clients=min_clients, seed=seed))
    job.to_clients(PLayerFLTask(method=method, model=model, model_args=arguments, dataset=dataset, image_size=image_size,
                                local_epochs=local_epochs, batch_size=batch_size, learning_rate=learning_rate,
                                weight_decay=weight_decay, focal_gamma=focal_gamma, fedprox_mu=fedprox_mu,
                                ditto_lambda=ditto_lambda, fedlp_keep=fedlp_keep, finetune_epochs=finetune_epochs, seed=seed))
    return job


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", default="playerfl", choices=METHODS)
    parser.add_argument("--num-rounds", type=int, default=50)
    parser.add_argument("--model", default="cnn5", choices=["cnn5", "resnet10"])
    parser.add_argument("--model-args", type=json.loads, default=None, metavar="JSON",
                        help='extra model arguments, e.g. \'{"channels": [8, 16, 32, 64, 128]}\'')
    parser.add_argument("--image-size", type=int, default=200)
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--focal-gamma", type=float, default=2.0)
    parser.add_argument("--fedprox-mu", type=float, default=0.1)
    parser.add_argument("--ditto-lambda", type=float, default=0.1)
    parser.add_argument("--fedlp-keep", type=float, default=0.7)
    parser.add_argument("--finetune-epochs", type=int, default=1)
    parser.add_argument("--min-clients", type=int, default=2)
    parser.add_argument("--dataset", default="isic")
    parser.add_argument("--seed", type=int, default=0)
