"""Cross-site evaluation after training: the selected global model and each site's final local model, scored at
every site on its held-out cases, as a sites x models matrix.

It answers the question a consortium asks after a federated run: does the global model beat what each site could
train alone, site by site, and does one site's model carry over to the others. The flow follows NVIDIA FLARE's
cross-site model evaluation (collect the models, then have every site score every model), with two differences
a hospital's policy needs: a site's local model leaves it only where the site allows it (`share_local_model` in its
policy; the site answers with its reason otherwise) and never when the job masks its updates or adds client-side
DP (`local_models_refusal`: the server asks for none); and the scores are the BraTS ones the test task sends, on
the test cases (validation cases without a test split), never on the cases a model trained on.

PLayer-FL's matrix is narrower (`personalised_against_global`): a site's personalised layers never leave it, so
each site scores its own personalised model and the server's global model, both on its test split.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract.evaluation import GLOBAL_MODEL, WITHHELD
from fl_contract.playerfl.protocol import PERSONALISED
from fl_contract.segmentation import (
    CROSS_VALIDATE_TASK,
    DICE,
    HD95,
    LESION_DICE,
    LESION_HD95,
    LOCAL_MODEL_TASK,
    MEAN,
    MODEL_NAME,
    metric_key,
)
from fl_contract.weights_encoding import WeightsEncodingError, decode_update
from server_app.aggregation import SiteUpdate, UpdateRejected, Weights, check_update, scalar_metrics, site_name

Send = Callable[[str, Weights, dict[str, Any]], list[FLModel]]
"""The workflow's broadcast: task name, model (before the job's weights encoding), meta -> the sites' answers."""



def local_models(send: Send, global_params: Weights, encoding: str) -> tuple[dict[str, Weights], dict[str, str]]:
    """Each site's final local model that its policy let leave, checked like a round's update, and why the others
    are absent (the site's words, or the check's)."""
    models: dict[str, Weights] = {}
    withheld: dict[str, str] = {}
    for result in sorted(send(LOCAL_MODEL_TASK, global_params, {}), key=site_name):
        site = site_name(result)
        if not result.params:
            withheld[site] = str((result.meta or {}).get(WITHHELD) or "the site sent no model")
            continue
        try:
            params = decode_update(global_params, result.params, encoding)
            check_update(SiteUpdate(site, params, 1), global_params)
        except (WeightsEncodingError, UpdateRejected) as err:
            withheld[site] = f"its model was refused: {err}"
            continue
        models[site] = params
    return models, withheld


def score_models(send: Send, models: dict[str, Weights], split: str,
                 stop: Callable[[], bool]) -> dict[str, dict[str, dict[str, float]]]:
    """{site: {model: the site's metrics on `split`}}: every model scored at every site that answers."""
    matrix: dict[str, dict[str, dict[str, float]]] = {}
    for name, params in models.items():
        if stop():
            break
        for result in send(CROSS_VALIDATE_TASK, params, {MODEL_NAME: name}):
            matrix.setdefault(site_name(result), {})[name] = scalar_metrics(result)
    return dict(sorted(matrix.items()))


def cross_site_record(split: str, models: list[str], matrix: dict[str, dict[str, dict[str, float]]],
                      withheld: dict[str, str], all_sites: list[str],
                      headline: Sequence[str] | None = None) -> dict[str, Any]:
    """results.json's `cross_site`: the scored split and models, each site's metrics per model, one matrix per
    headline metric ({metric: {site: {model: value}}}; a segmentation run's Dice, HD95 and their lesion-wise means
    unless `headline` names others), what was withheld and who answered nothing."""
    keys = headline or [metric_key(split, metric, MEAN) for metric in (DICE, HD95, LESION_DICE, LESION_HD95)]
    matrices = {key: {site: {model: values[key] for model, values in row.items() if key in values}
                      for site, row in matrix.items()} for key in keys}
    return {"split": split, "models": models, "sites": matrix, "matrix": matrices, "withheld": withheld,
            "no_result": sorted(set(all_sites) - set(matrix))}


def personalised_against_global(personalised: dict[str, dict[str, float]], global_scores: dict[str, dict[str, float]],
                                headline: Sequence[str], all_sites: list[str], global_model: str) -> dict[str, Any]:
    """PLayer-FL's matrix: each site's personalised model and the server's global model, both on the site's own
    test split (a personalised model is scored at home only: its personal layers never leave the site).
    `global_model` says what the global model is made of; a site is in the matrix once it scored both."""
    sites = sorted(set(personalised) & set(global_scores))
    matrix = {site: {PERSONALISED: {k: personalised[site][k] for k in headline if k in personalised[site]},
                     GLOBAL_MODEL: {k: global_scores[site][k] for k in headline if k in global_scores[site]}}
              for site in sites}
    record = cross_site_record("test", [PERSONALISED, GLOBAL_MODEL], matrix, {}, all_sites, headline)
    return {**record, "global_model": global_model}


def cross_site_evaluation(send: Send, global_model: Weights, final_params: Weights, encoding: str, split: str,
                          local_refusal: str, all_sites: list[str], stop: Callable[[], bool]) -> dict[str, Any]:
    """The whole evaluation: the local models (unless the job forbids them all), then every model at every site.
    `global_model` is the model scored as "global" (the selected one); `final_params` the last global model, which
    the sites trained from in the last round (a float16 answer is a difference from it)."""
    if local_refusal:
        models: dict[str, Weights] = {GLOBAL_MODEL: global_model}
        withheld = {site: local_refusal for site in sorted(all_sites)}
    else:
        locals_, withheld = local_models(send, final_params, encoding)
        models = {GLOBAL_MODEL: global_model, **locals_}
    matrix = score_models(send, models, split, stop)
    return cross_site_record(split, list(models), matrix, withheld, all_sites)
