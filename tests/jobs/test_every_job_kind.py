"""Every job kind is declared once (jobs/<kind>/spec.py); CLI, export, allow-lists and docs are derived from it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import JOB_FILES, read_exported_job

from federation_tools.job_cli import main
from fl_contract.version import AGENT_VERSION
from jobs.common import build_job, export
from jobs.docs import DOCS_FILE, parameter_tables
from jobs.registry import job_kind, kinds, registered, server_allow_list, site_allow_list
from jobs.spec import Apps, JobKind, JobParams, ParameterError, import_class, param
from site_agent.tasks import installed_task_classes

ROOT = Path(__file__).resolve().parents[2]
KINDS = sorted(kinds())


@pytest.mark.parametrize("name", KINDS)
def test_job_kind_exports_without_code_and_records_the_agent_version(name, tmp_path):
    job = read_exported_job(export(build_job(job_kind(name)), tmp_path))

    assert job.files == JOB_FILES
    assert job.meta["site_agent_version"] == AGENT_VERSION
    assert set(job.site_classes()) <= set(site_allow_list()) and set(job.server_classes()) <= set(server_allow_list())


@pytest.mark.parametrize("name", KINDS)
def test_every_declared_class_exists_and_site_tasks_are_installed_by_the_agent(name):
    kind = job_kind(name)

    for path in (kind.controller, kind.site_task, *kind.site_classes, *kind.server_classes):
        assert isinstance(import_class(path), type), path
    assert kind.site_task in installed_task_classes()


@pytest.mark.parametrize("name", KINDS)
def test_every_parameter_is_an_option_with_help_and_a_default_that_validates(name):
    kind = job_kind(name)
    defaults = kind.params()

    for field in dataclasses.fields(kind.params):
        assert field.metadata["help"], field.name
    assert defaults == kind.params(**{f.name: getattr(defaults, f.name) for f in dataclasses.fields(defaults)})


def test_fl_job_passes_options_to_the_job_and_refuses_values_outside_the_declared_range(tmp_path, capsys):
    assert main(["export", "fedavg-linear", "--out", str(tmp_path), "--num-rounds", "2", "--aggregation", "median"]) == 0
    workflow = read_exported_job(tmp_path / "fedavg-linear").workflow
    assert workflow["args"]["num_rounds"] == 2 and workflow["args"]["aggregation"] == "median"

    with pytest.raises(SystemExit):
        main(["export", "fedavg-linear", "--out", str(tmp_path), "--trim-fraction", "0.7"])
    assert "trim_fraction=0.7: must be at most 0.49" in capsys.readouterr().err


def test_parameters_refuse_wrong_types_and_cross_field_rules():
    from jobs.segmentation.spec import SegmentationParams

    with pytest.raises(ParameterError, match="num_rounds='3': expected"):
        SegmentationParams(num_rounds="3")
    with pytest.raises(ParameterError, match="blocks_up"):
        SegmentationParams(roi_size=(32, 32, 32), blocks_down=(1, 1, 1), blocks_up=(1,))


def test_export_refuses_a_class_sites_would_refuse(tmp_path):
    kind = _throwaway_kind()

    with pytest.raises(RuntimeError, match=r"nvflare.app_common.np.np_trainer.NPTrainer.*jobs/<kind>/spec.py"):
        export(build_job(kind), tmp_path)


def test_a_registered_job_kind_reaches_cli_export_allow_lists_and_docs_with_no_other_edit(tmp_path, capsys):
    kind = _throwaway_kind()

    with registered(kind):
        assert "nvflare.app_common.np.np_trainer.NPTrainer" in site_allow_list()
        assert main(["list"]) == 0 and "throwaway" in capsys.readouterr().out
        assert main(["export", "throwaway", "--out", str(tmp_path), "--num-rounds", "4"]) == 0
        assert "## `throwaway`" in parameter_tables()
    job = read_exported_job(tmp_path / "throwaway")

    assert job.executor["path"] == "nvflare.app_common.np.np_trainer.NPTrainer"
    assert job.workflow["args"]["num_rounds"] == 4
    assert "nvflare.app_common.np.np_trainer.NPTrainer" not in site_allow_list()


def test_the_parameter_docs_are_generated_from_the_specs():
    assert (ROOT / DOCS_FILE).read_text() == parameter_tables(), "regenerate with: fl-job docs"


@dataclass(frozen=True)
class _ThrowawayParams(JobParams):
    num_rounds: int = param(1, "rounds", low=1)
    delta: float = param(1.0, "what the trainer adds")


def _throwaway_kind() -> JobKind[_ThrowawayParams]:
    return JobKind(
        name="throwaway", summary="a job kind that exists only in this test", params=_ThrowawayParams,
        controller="server_app.fedavg.FedAvgController", site_task="nvflare.app_common.np.np_trainer.NPTrainer",
        apps=lambda p: Apps(controller={"num_rounds": p.num_rounds, "model": "linear_regression", "model_args": {},
                                        "aggregation": "weighted_mean", "trim_fraction": 0.1, "min_clients": 1,
                                        "seed": 0},
                            site_task={"delta": p.delta}))
