"""Every job kind an admin can build exports as configuration only, within the provisioned allow-lists."""

from __future__ import annotations

import argparse
import inspect

import pytest
from nvflare.app_common.np.np_trainer import NPTrainer
from support import JOB_FILES, read_exported_job

from jobs.cli import main
from jobs.common import export, new_job
from jobs.registry import JOB_MODULES, job_module
from server_app.fedavg import FedAvgController
from site_agent import __version__


@pytest.mark.parametrize("kind", sorted(JOB_MODULES))
def test_job_kind_exports_without_code_and_records_the_agent_version(kind, tmp_path):
    job = read_exported_job(export(job_module(kind).build_job(), tmp_path))

    assert job.files == JOB_FILES
    assert job.meta["site_agent_version"] == __version__


def test_export_refuses_a_class_sites_would_refuse(tmp_path):
    job = new_job("not-allowed", min_clients=1)
    job.to_server(FedAvgController(num_rounds=1, model="linear_regression"))
    job.to_clients(NPTrainer())

    with pytest.raises(RuntimeError, match=r"nvflare.app_common.np.np_trainer.NPTrainer.*provisioning/policy.py"):
        export(job, tmp_path)


@pytest.mark.parametrize("kind", sorted(JOB_MODULES))
def test_command_line_options_match_the_job_parameters_and_defaults(kind):
    module = job_module(kind)
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    options = {a.dest: a.default for a in parser._actions if a.dest != "help"}
    parameters = {n: p.default for n, p in inspect.signature(module.build_job).parameters.items()}

    assert set(options) == set(parameters)
    assert {n: _comparable(v) for n, v in options.items()} == {n: _comparable(v) for n, v in parameters.items()}


def test_fl_job_exports_with_command_line_parameters(tmp_path):
    assert main(["export", "fedavg-linear", "--out", str(tmp_path), "--num-rounds", "2", "--aggregation", "median"]) == 0

    workflow = read_exported_job(tmp_path / "fedavg-linear").workflow
    assert workflow["args"]["num_rounds"] == 2 and workflow["args"]["aggregation"] == "median"


def _comparable(value):
    """argparse keeps list defaults where signatures use tuples; compare the values, not the container."""
    return list(value) if isinstance(value, tuple) else value
