"""Every job kind's parameters by kind name: what a job's server workflow and site task rebuild from its JSON.

A job's configuration carries, for its controller and its site task alike, the kind's name and the whole parameter
object (`job_component_args`); each component rebuilds and validates it with `job_params`, so a value the kind does
not accept stops the component before it does anything, naming the parameter. The list below is the one place a
kind's parameters are registered; `jobs.registry` declares the kinds themselves.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar, runtime_checkable

from fl_contract.job_params.data_summary import DataSummaryParams
from fl_contract.job_params.evaluation import EvaluationParams, IsicEvaluationParams
from fl_contract.job_params.fedavg_linear import FedAvgLinearParams
from fl_contract.job_params.fedkt_csd import FedKTCSDParams
from fl_contract.job_params.held_model import HeldModelParams
from fl_contract.job_params.inference import InferenceParams
from fl_contract.job_params.playerfl import PLayerFLParams
from fl_contract.job_params.segmentation import SegmentationParams
from fl_contract.params import JobParams, ParameterError, params_from_json, params_to_json

T = TypeVar("T")

__all__ = ["PARAMS", "DataSummaryParams", "EvaluationParams", "FedAvgJob", "FedAvgLinearParams", "FedKTCSDParams",
           "HeldModelParams", "InferenceParams", "IsicEvaluationParams", "PLayerFLParams", "RoundJob",
           "SegmentationParams", "job_component_args", "job_params", "registered_params"]

PARAMS: dict[str, type[JobParams]] = {
    "fedavg-linear": FedAvgLinearParams,
    "brats-segmentation": SegmentationParams,
    "brats-inference": InferenceParams,
    "brats-evaluation": EvaluationParams,
    "isic-evaluation": IsicEvaluationParams,
    "playerfl": PLayerFLParams,
    "fedkt-csd": FedKTCSDParams,
    "data-summary": DataSummaryParams,
}


def job_component_args(kind: str, params: JobParams) -> dict[str, Any]:
    """A component's constructor arguments in the job's JSON: the kind's name and every parameter."""
    return {"kind": kind, "params": params_to_json(params)}


@runtime_checkable
class RoundJob(Protocol):
    """What the round loop (server_app.round_workflow) reads of a kind's parameters."""

    @property
    def num_rounds(self) -> int: ...
    @property
    def min_clients(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def quorum_wait_s(self) -> float: ...


@runtime_checkable
class FedAvgJob(RoundJob, Protocol):
    """What the FedAvg workflow (server_app.fedavg) reads besides: fedavg-linear and brats-segmentation provide it."""

    @property
    def aggregation(self) -> str: ...
    @property
    def trim_fraction(self) -> float: ...
    def model_spec(self) -> tuple[str, dict[str, Any]]: ...
    def selection(self) -> tuple[str | None, str | None, str | None, str | None]: ...
    def cross_site_split(self) -> str | None: ...
    def local_models_refusal(self) -> str: ...


def job_params(kind: str, values: Mapping[str, Any], expected: type[T]) -> T:
    """The parameters of a job of `kind` rebuilt from its JSON and validated, when they are what the component
    runs on (`expected`: a parameters class or a runtime-checkable protocol); ParameterError naming the kind or the
    parameter otherwise."""
    params_class = PARAMS.get(kind)
    if params_class is None:
        raise ParameterError(f"unknown job kind {kind!r}: this site_agent runs {sorted(PARAMS)}")
    params = params_from_json(params_class, values)
    if not isinstance(params, expected):
        raise ParameterError(f"job kind {kind!r} has {params_class.__name__}, which a component running "
                             f"{expected.__name__} cannot take")
    return params


@contextmanager
def registered_params(kind: str, params: type[JobParams]) -> Iterator[None]:
    """`params` registered under `kind` for the duration (a throwaway kind in a test)."""
    PARAMS[kind] = params
    try:
        yield
    finally:
        del PARAMS[kind]
