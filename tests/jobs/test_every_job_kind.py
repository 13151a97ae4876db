"""Every job kind is declared once (jobs/<kind>/spec.py); CLI, export, allow-lists and docs are derived from it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import JOB_FILES, read_exported_job

from federation_tools.job_cli import main
from fl_contract.job_params import FedAvgLinearParams, registered_params
from fl_contract.params import ParameterError, param
from fl_contract.version import AGENT_VERSION
from jobs.common import build_job, export
from jobs.docs import DOCS_FILE, parameter_tables
from jobs.fedavg_linear.spec import KIND as FEDAVG_LINEAR
from jobs.registry import job_kind, kinds, registered, server_allow_list, site_allow_list
from jobs.spec import Component, Extras, JobKind, import_class
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
    assert main(["export", "fedavg-linear", "--out", str(tmp_path), "--num-rounds", "2",
                 "--aggregation", "median"]) == 0
    workflow = read_exported_job(tmp_path / "fedavg-linear").workflow
    assert workflow["args"]["params"]["num_rounds"] == 2 and workflow["args"]["params"]["aggregation"] == "median"

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
    kind = dataclasses.replace(_throwaway_kind(), extras=lambda p: Extras(site=(Component(UNLISTED, {}, "np"),)))

    with registered_params(kind.name, kind.params), pytest.raises(RuntimeError, match=rf"{UNLISTED}.*<kind>/spec.py"):
        export(build_job(kind), tmp_path)


def test_a_throwaway_parameter_reaches_cli_export_docs_and_both_components_with_no_other_edit(tmp_path, capsys):
    kind = _throwaway_kind()

    with registered(kind):
        assert main(["list"]) == 0 and "throwaway" in capsys.readouterr().out
        assert main(["export", "throwaway", "--out", str(tmp_path), "--throwaway-factor", "2.5"]) == 0
        assert "`throwaway_factor`" in parameter_tables()
        job = read_exported_job(tmp_path / "throwaway")
        controller = import_class(job.workflow["path"])(**job.workflow["args"])
        site_task = import_class(job.executor["path"])(**job.executor["args"])

    assert controller.job.throwaway_factor == site_task.job.throwaway_factor == 2.5
    with pytest.raises(ParameterError, match="unknown job kind 'throwaway'"):
        import_class(job.executor["path"])(**job.executor["args"])  # unregistered, no component can rebuild it


def test_the_parameter_docs_are_generated_from_the_specs():
    assert (ROOT / DOCS_FILE).read_text() == parameter_tables(), "regenerate with: fl-job docs"


UNLISTED = "nvflare.app_common.widgets.validation_json_generator.ValidationJsonGenerator"


@dataclass(frozen=True)
class _ThrowawayParams(FedAvgLinearParams):
    throwaway_factor: float = param(1.0, "a parameter that exists only in this test")


def _throwaway_kind() -> JobKind[_ThrowawayParams]:
    return dataclasses.replace(FEDAVG_LINEAR, name="throwaway", summary="a job kind that exists only in this test",
                               params=_ThrowawayParams)
