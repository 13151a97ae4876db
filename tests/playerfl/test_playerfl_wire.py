"""What a site sends, per round and method, and that its local suffix survives a restart (no FLARE needed)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract.models import build_model, state_dict_to_numpy
from fl_contract.playerfl import protocol
from fl_contract.playerfl.layers import model_layers, prefix_keys
from jobs.playerfl.spec import KIND, PLayerFLParams
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.kit.site_config import SiteConfig
from site_agent.tasks.executor import SiteContext

MODEL_ARGS = {"channels": [4, 4, 8, 8, 8], "hidden": 8}


def _context(tmp_path: Path) -> SiteContext:
    data = write_isic_site(tmp_path / "data", 1, n_sites=2, n_images=20, size=32)
    config = SiteConfig(path=tmp_path / "site_agent.json", datasets={"isic": str(data)})
    return SiteContext("site-1", config, torch.device("cpu"), tmp_path / "workspace", Signal())


def _task(method: str):
    params = PLayerFLParams(method=method, model_args=MODEL_ARGS, image_size=32, batch_size=8)
    return KIND.site_task_component(params).instantiate()


def _initial_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)  # the tasks' seed: every site starts from these weights
    return build_model("cnn5", **MODEL_ARGS).state_dict()


def _saved_model(workspace: Path) -> dict[str, torch.Tensor]:
    return torch.load(next((workspace / "playerfl").rglob("*.pt")), weights_only=True)["model"]


def _global(shared: int, method: str, round_index: int) -> FLModel:
    torch.manual_seed(99)
    net = build_model("cnn5", **MODEL_ARGS)
    params = {k: v for k, v in state_dict_to_numpy(net).items() if k in prefix_keys(model_layers(net), shared)}
    meta = {protocol.METHOD: method, protocol.SHARED_LAYERS: shared}
    return FLModel(params=params, current_round=round_index, total_rounds=3, meta=meta)


def test_playerfl_sends_all_but_the_last_layer_and_its_curve_once_then_exactly_the_prefix(tmp_path):
    ctx, task = _context(tmp_path), _task("playerfl")
    layers = model_layers(build_model("cnn5", **MODEL_ARGS))

    first = task.task_train(_global(len(layers) - 1, "playerfl", 0), ctx)
    second = task.task_train(_global(3, "playerfl", 1), ctx)

    assert sorted(first.params) == sorted(prefix_keys(layers, len(layers) - 1))
    assert first.meta[protocol.SENSITIVITY]["layers"] == [layer.name for layer in layers]
    assert sorted(second.params) == sorted(prefix_keys(layers, 3))
    assert set(second.meta) == {"NUM_STEPS_CURRENT_ROUND"}
    assert all(isinstance(v, np.ndarray) and v.dtype == np.float32 for v in second.params.values())


def _three_rounds(ctx: SiteContext, restart_before_last: bool, forget_state: bool = False) -> dict[str, torch.Tensor]:
    task = _task("playerfl")
    task.task_train(_global(6, "playerfl", 0), ctx)
    task.task_train(_global(3, "playerfl", 1), ctx)
    if forget_state:
        next((ctx.workspace_dir / "playerfl").rglob("*.pt")).unlink()
    last = _task("playerfl") if restart_before_last else task
    last.task_train(_global(3, "playerfl", 2), ctx)
    return _saved_model(ctx.workspace_dir)


def test_local_suffix_is_kept_between_rounds_and_across_a_restart(tmp_path):
    uninterrupted = _three_rounds(_context(tmp_path / "a"), restart_before_last=False)
    restarted = _three_rounds(_context(tmp_path / "b"), restart_before_last=True)
    forgotten = _three_rounds(_context(tmp_path / "c"), restart_before_last=True, forget_state=True)

    suffix = [k for k in uninterrupted if k.startswith(("conv4", "conv5", "fc"))]
    assert all(torch.equal(uninterrupted[k], restarted[k]) for k in suffix)
    assert not all(torch.equal(uninterrupted[k], forgotten[k]) for k in suffix)


def test_a_site_back_after_missing_rounds_starts_from_its_own_last_state(tmp_path):
    """A site restarted mid-job (a new job process) misses rounds 3 and 4 and is sent round 5: its local suffix is
    the one it saved after its last round (round 2), not fresh weights; a site that lost its disk starts fresh."""
    ctx, task = _context(tmp_path), _task("playerfl")
    task.task_train(_global(6, "playerfl", 0), ctx)
    task.task_train(_global(3, "playerfl", 1), ctx)
    before_the_kill = _saved_model(ctx.workspace_dir)
    suffix = [k for k in before_the_kill if k.startswith(("conv4", "conv5", "fc"))]

    _, _, back = _task("playerfl")._prepare(_global(3, "playerfl", 4), ctx)
    for saved in (ctx.workspace_dir / "playerfl").rglob("*.pt"):
        saved.unlink()
    _, _, forgot = _task("playerfl")._prepare(_global(3, "playerfl", 4), ctx)

    assert all(torch.equal(back.state_dict()[k], before_the_kill[k]) for k in suffix)
    assert not all(torch.equal(forgot.state_dict()[k], before_the_kill[k]) for k in suffix)


def test_local_sends_no_parameters_and_fedlp_sends_whole_layers(tmp_path):
    ctx = _context(tmp_path)
    layers = model_layers(build_model("cnn5", **MODEL_ARGS))

    local = _task("local").task_train(_global(0, "local", 0), ctx)
    fedlp = _task("fedlp").task_train(_global(len(layers), "fedlp", 0), ctx)

    assert local.params is None
    sent = {layer.name for layer in layers if layer.keys[0] in fedlp.params}
    assert 0 < len(sent) < len(layers)
    assert sorted(fedlp.params) == sorted(k for layer in layers if layer.name in sent for k in layer.keys)


def test_fedbabu_never_sends_or_trains_the_head(tmp_path):
    ctx, task = _context(tmp_path), _task("fedbabu")
    layers = model_layers(build_model("cnn5", **MODEL_ARGS))

    result = task.task_train(_global(len(layers) - 1, "fedbabu", 0), ctx)

    saved, initial = _saved_model(ctx.workspace_dir), _initial_state()
    assert not set(result.params) & set(layers[-1].keys)
    assert all(torch.equal(saved[k], initial[k]) for k in layers[-1].keys)


def test_site_refuses_a_server_running_another_method(tmp_path):
    with pytest.raises(ValueError, match="runs method 'fedavg' but the server runs 'playerfl'"):
        _task("fedavg").task_train(_global(6, "playerfl", 0), _context(tmp_path))


def _state(workspace: Path, round_number: int) -> dict:
    return torch.load(next((workspace / "playerfl").rglob(f"round-{round_number}.pt")), weights_only=True)


def test_the_sites_optimizer_state_is_kept_across_rounds(tmp_path):
    ctx, task = _context(tmp_path), _task("fedavg")

    task.task_train(_global(7, "fedavg", 0), ctx)
    task.task_train(_global(7, "fedavg", 1), ctx)

    steps = [int(_state(ctx.workspace_dir, r)["optimizers"]["model"]["state"][0]["step"]) for r in (0, 1)]
    assert steps[1] == 2 * steps[0] > 0


def test_fedbabu_reports_its_fine_tuned_model(tmp_path):
    ctx, task = _context(tmp_path), _task("fedbabu")
    task.task_train(_global(6, "fedbabu", 0), ctx)

    result = task.task_evaluate(_global(6, "fedbabu", 1), ctx)

    assert result.metrics["best_round"] == 3  # the total rounds: the fine-tuned model, not a federated round's
    assert result.metrics["best_val_macro_f1"] == result.metrics["val_macro_f1"]
    assert "finetune" in _state(ctx.workspace_dir, 1)["optimizers"]


def test_pfedme_sends_its_local_copy_and_deploys_its_personal_model(tmp_path):
    ctx, task = _context(tmp_path), _task("pfedme")
    received = _global(7, "pfedme", 0)

    result = task.task_train(received, ctx)

    state = _state(ctx.workspace_dir, 0)
    sent = {k: torch.as_tensor(v) for k, v in result.params.items()}
    assert sorted(result.params) == sorted(state["model"])
    assert all(torch.equal(sent[k], state["model"][k]) for k in sent)
    assert not torch.equal(state["personal"]["conv1.weight"], state["model"]["conv1.weight"])
    assert set(state["optimizers"]) == {"model", "personal"}
    before = float(torch.dist(torch.as_tensor(received.params["fc2.weight"]), state["personal"]["fc2.weight"]))
    after = float(torch.dist(sent["fc2.weight"], state["personal"]["fc2.weight"]))
    assert after < before  # w moved towards theta
