"""One local epoch through the federated site task vs the bare MONAI training loop (same data, model, seed).

"Site task" is `SegmentationTask.task_train` (score the received model with sliding-window inference: label maps,
Dice and HD95 per case, rows to the per-case file; one epoch, weights to numpy, FLModel -> Shareable: everything
a FLARE round does at the site except the network transfer). "Bare
MONAI" is the tutorial loop written out here on the same cached dataset: sliding-window Dice, then one epoch of
DiceLoss + Adam. Both run warm (cases already decoded and cached), interleaved, in one process. Goal: <= 1.10x.

    .venv/bin/python bench/segmentation_overhead.py [--cases 4 --size 48 --roi 32 --filters 8 --repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from monai.data import DataLoader, decollate_batch
from monai.inferers import sliding_window_inference
from monai.losses import DiceLoss
from monai.metrics import DiceMetric
from monai.networks.nets import SegResNet
from monai.transforms import Activations, AsDiscrete, Compose
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from nvflare.app_common.utils.fl_model_utils import FLModelUtils

from fl_contract.models import state_dict_to_numpy
from fl_contract.segmentation import VAL
from jobs.segmentation.spec import KIND, SegmentationParams
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.kit.site_config import SiteConfig
from site_agent.tasks.executor import SiteContext


def _bare_monai_round(net: SegResNet, train: DataLoader, val: DataLoader, roi: list[int]) -> None:
    metric = DiceMetric(include_background=True, reduction="mean_batch")
    post = Compose([Activations(sigmoid=True), AsDiscrete(threshold=0.5)])
    net.eval()
    with torch.no_grad():
        for batch in val:
            logits = sliding_window_inference(batch["image"], roi, 1, net, overlap=0.5)
            metric(y_pred=[post(x) for x in decollate_batch(logits)], y=decollate_batch(batch["label"]))
    metric.aggregate()
    loss_fn = DiceLoss(smooth_nr=0, smooth_dr=1e-5, squared_pred=True, to_onehot_y=False, sigmoid=True)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-4, weight_decay=1e-5)
    net.train()
    for batch in train:
        optimizer.zero_grad()
        loss_fn(net(batch["image"]), batch["label"]).backward()
        optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=4)
    parser.add_argument("--size", type=int, default=48)
    parser.add_argument("--roi", type=int, default=32)
    parser.add_argument("--filters", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    roi = [args.roi] * 3
    model_args = {"init_filters": args.filters, "blocks_down": [1, 2, 2, 4], "blocks_up": [1, 1, 1],
                  "dropout_prob": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "site-1" / "brats"
        write_brats_site(folder, 1, n_cases=args.cases, shape=(args.size,) * 3, layout="nifti")
        task = KIND.site_task_component(SegmentationParams(init_filters=args.filters, dropout_prob=0.0,
                                                          roi_size=tuple(roi), val_fraction=0.25, test_fraction=0.0,
                                                          tracking=False)).instantiate()
        ctx = SiteContext("site-1", SiteConfig(Path(tmp) / "site_agent.json", {"brats": str(folder)}),
                          torch.device("cpu"), Path(tmp), Signal())
        torch.manual_seed(0)
        global_params = state_dict_to_numpy(SegResNet(**model_args, in_channels=4, out_channels=3))
        received = FLModel(params=global_params, params_type=ParamsType.FULL, current_round=0)
        data = task.site_data(ctx)  # decode and cache once, as the task does in round 1
        train_loader, val_loader = data.train_loader(1, seed=0), data.eval_loader(VAL)
        times: dict[str, list[float]] = {"site task": [], "bare MONAI": []}
        for repeat in range(args.repeats + 1):  # the first pass of each warms up kernels and allocator, not timed
            torch.manual_seed(0)
            start = time.perf_counter()
            FLModelUtils.to_shareable(task.task_train(received, ctx))
            if repeat:
                times["site task"].append(time.perf_counter() - start)
            torch.manual_seed(0)
            net = SegResNet(**model_args, in_channels=4, out_channels=3)
            net.load_state_dict({k: torch.as_tensor(v) for k, v in global_params.items()})
            start = time.perf_counter()
            _bare_monai_round(net, train_loader, val_loader, roi)
            if repeat:
                times["bare MONAI"].append(time.perf_counter() - start)
    base = statistics.median(times["bare MONAI"])
    print(f"{len(data.split.train)} training + {len(data.split.val)} validation cases of {args.size}^3, "
          f"ROI {args.roi}, SegResNet init_filters {args.filters}, {args.repeats} interleaved repeats, "
          f"{torch.get_num_threads()} threads\n")
    print("| loop | median (s) | ratio to bare MONAI | min (s) |\n| --- | ---: | ---: | ---: |")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.2f} | {statistics.median(values) / base:.2f}x "
              f"| {min(values):.2f} |")


if __name__ == "__main__":
    main()
