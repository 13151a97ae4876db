"""What a job carries, as a site sees it at deploy: FLARE's own zip of each exported job, checked against the
provisioned allow-list and a site's dataset keys."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from nvflare.fuel.utils.zip_utils import zip_directory_to_bytes

from fl_contract.job_privacy import SitePrivacy
from jobs.common import build_job, export
from jobs.registry import kinds, site_allow_list
from provisioning.policy import site_deployer_component
from site_agent.kit.site_config import write_site_config
from site_agent.privacy.job_contents import app_refusal, launcher_refusal

DEPLOYER_ARGS = site_deployer_component()["args"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("jobs")
    return {name: export(build_job(kind), out / name) for name, kind in kinds().items()}


@pytest.fixture
def kit(tmp_path) -> Path:
    """A site's local/ folder with the provisioned allow-list and every dataset key the job kinds use mapped."""
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "resources.json").write_text(json.dumps({"class_allow_list": site_allow_list()}))
    keys = ["linear", "brats", "brats_inference", "brats_results", "isic", "dcae"]
    write_site_config(tmp_path, {key: str(tmp_path) for key in keys})
    return tmp_path


def _refusal(job_dir: Path, kit: Path, datasets: dict[str, str] | None = None) -> str:
    if datasets is not None:
        write_site_config(kit, datasets)
    meta = json.loads((job_dir / "meta.json").read_text())
    app = zip_directory_to_bytes(str(job_dir / "app"), "")
    return app_refusal(app, SitePrivacy.from_meta(meta), kit / "local", DEPLOYER_ARGS["kind_tasks"],
                       DEPLOYER_ARGS["dataset_keys"])


def _copy(job_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(job_dir, tmp_path / "copy" / job_dir.name))


def _edit_client(job_dir: Path, edit) -> None:
    path = job_dir / "app" / "config" / "config_fed_client.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))


def test_every_exported_job_kind_is_admitted(exported, kit):
    for name, job_dir in exported.items():
        assert _refusal(job_dir, kit) == "", name


def test_a_job_with_code_is_refused_naming_the_files(exported, kit, tmp_path):
    job_dir = _copy(exported["fedavg-linear"], tmp_path)
    (job_dir / "app" / "custom").mkdir()
    (job_dir / "app" / "custom" / "evil.py").write_text("import os\n")
    (job_dir / "app" / "config" / "helper.py").write_text("x = 1\n")
    (job_dir / "app" / "run.sh").write_text("#!/bin/sh\n")

    reason = _refusal(job_dir, kit)

    assert "carries files other than configuration (config/helper.py, custom/evil.py, run.sh)" in reason
    assert str(kit) not in reason


def test_flares_signature_files_are_not_code(exported, kit, tmp_path):
    job_dir = _copy(exported["fedavg-linear"], tmp_path)
    for folder in (job_dir / "app", job_dir / "app" / "config"):
        (folder / ".__nvfl_sig.json").write_text("{}")
        (folder / ".__nvfl_submitter.crt").write_text("cert")

    assert _refusal(job_dir, kit) == ""


def test_unlisted_classes_anywhere_in_the_site_config_are_named(exported, kit, tmp_path):
    job_dir = _copy(exported["fedavg-linear"], tmp_path)

    def edit(config):
        config["components"].append({"id": "run", "path": "subprocess.Popen", "args": {"args": ["touch", "/tmp/x"]}})
        config["components"].append({"id": "short", "name": "ClientAPIExecutor", "args": {}})
        config["executors"][0]["executor"]["args"]["nested"] = {"class_path": "os.system", "args": {}}

    _edit_client(job_dir, edit)

    reason = _refusal(job_dir, kit)

    assert "not in this site's class allow-list" in reason
    assert "class subprocess.Popen (components[1])" in reason  # components[0]: the job's task clock
    assert "class os.system (executors[0].executor.args.nested)" in reason
    assert "components[2] names class 'ClientAPIExecutor' by short name" in reason


@pytest.mark.parametrize("key", ["../../../etc", "/etc", "unmapped"])
def test_a_dataset_key_the_site_does_not_map_is_named(exported, kit, tmp_path, key):
    job_dir = _copy(exported["fedavg-linear"], tmp_path)
    _edit_client(job_dir, lambda c: c["executors"][0]["executor"]["args"]["params"].update(dataset=key))

    reason = _refusal(job_dir, kit)

    assert f"dataset key dataset={key!r} is not one this site maps" in reason
    assert str(kit) not in reason


def test_a_site_without_its_configuration_maps_no_key(exported, kit):
    (kit / "local" / "site_agent.json").unlink()

    assert "dataset key dataset='linear' is not one this site maps" in _refusal(exported["fedavg-linear"], kit)


def test_a_task_of_another_kind_or_arguments_unlike_the_declaration_are_refused(exported, kit, tmp_path):
    other = _copy(exported["fedavg-linear"], tmp_path)
    task = DEPLOYER_ARGS["kind_tasks"]["brats-segmentation"]
    _edit_client(other, lambda c: c["executors"][0]["executor"].update(path=task))
    weaker = _copy(exported["brats-segmentation"], tmp_path)
    meta = json.loads((weaker / "meta.json").read_text())
    meta["site_privacy"].update(dp_clip_norm=1.0, dp_noise_multiplier=2.0)
    (weaker / "meta.json").write_text(json.dumps(meta))

    assert "declares kind 'fedavg-linear', whose site task here is" in _refusal(other, kit)
    assert f"runs '{task}'" in _refusal(other, kit)
    assert "dp_noise_multiplier=0.0 (declared 2.0)" in _refusal(weaker, kit)


def test_a_launcher_spec_that_chooses_the_python_is_refused():
    meta = {"launcher_spec": {"site-1": {"docker": {"image": "evil:latest"}}}}

    assert "launcher_spec" in launcher_refusal(meta, "site-1")
    assert launcher_refusal({}, "site-1") == ""
