"""Helpers shared by tests: the demo federation's names and how to provision it with its data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from nvflare.app_common.abstract.fl_model import FLModel
from nvflare.app_common.decomposers import common_decomposers
from nvflare.app_common.utils.fl_model_utils import FLModelUtils
from nvflare.fuel.flare_api.flare_api import Session
from nvflare.fuel.utils import fobs

from federation_tools.loopback import LoopbackFederation, free_port
from fl_contract.job_params import SegmentationParams
from fl_contract.job_params.segmentation import CaseRecipe
from jobs.segmentation.spec import CPU_DEMO_DATA
from provisioning.provision import Federation, customise, load_template, provision
from server_app.fedkt_csd import secure_statistics
from server_app.privacy.secure_aggregation import SecureAggregation
from site_agent.data.demo.linear_demo import write_linear_site
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.kit.site_config import write_site_config


def require(missing: str | None, what: str) -> None:
    """Skip, saying why, when `missing` names what this machine lacks for `what`; under CI=true fail instead: .ci/run
    installs every tool the suite needs, so a CI run that skipped would pass without running the test."""
    if not missing:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what}: {missing}, under CI=true (.ci/run installs it; fix the CI machine, not the test)",
                    pytrace=False)
    pytest.skip(f"{what}: {missing}")


def chromium() -> str:
    """Debian's chromium; fails under CI, skips elsewhere, when it is not installed."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    require(None if found else "chromium not installed (apt-get install chromium)", "a headless browser")
    assert found is not None
    return found


def screenshot(page: Path, out: Path, width: int = 1200, height: int = 1000) -> Path:
    """`page` rendered by headless Chromium (Debian's) into the PNG `out`; the page must fetch nothing, so every
    request but the file itself is refused."""
    subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--host-resolver-rules=MAP * ~NOTFOUND", f"--window-size={width},{height}",
                    f"--screenshot={out}", Path(page).resolve().as_uri()],
                   check=True, capture_output=True, timeout=120)
    return out


@contextmanager
def browser(width: int = 1200, height: int = 1400) -> Iterator[Any]:
    """Headless Debian chromium driven through Selenium by Debian's chromedriver (given by path, so Selenium never
    downloads a driver or a browser); every host but 127.0.0.1 is refused. Quit at the end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = chromium()
    driver_path = shutil.which("chromedriver")
    require(None if driver_path else "chromedriver not installed (apt-get install chromium-driver)",
            "a browser driver")
    assert driver_path is not None
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                     f"--window-size={width},{height}", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def non_blank(png: Path) -> bool:
    """More than a few colours: text, tables and plots rendered, not a blank or a one-line error page."""
    from PIL import Image

    colours = Image.open(png).convert("RGB").getcolors(maxcolors=1 << 20)
    return colours is None or len(colours) > 50


ADMIN = "admin@cc.org"
SUPER_ADMIN = "super@cc.org"
SITES = ["site-1", "site-2", "site-3"]
FEDAVG_REFERENCE = {1: [1.354, -2.023], 3: [1.935, -2.898], 5: [1.995, -2.99]}
"""The default fedavg-linear job's global weights per round on the demo sites (docs/algorithms.md)."""


def recipe(roi_size: tuple[int, ...], test_fraction: float = 0.0, **params: Any) -> CaseRecipe:
    """The data recipe of a brats-segmentation job with these parameters (no test split unless asked): the values
    and their checks come from the job's parameters, as at a site."""
    return SegmentationParams(roi_size=roi_size, test_fraction=test_fraction, **params).case_recipe()


def provision_demo_federation(
    workspace: Path, name: str = "hospital-federation", sites: list[str] = SITES, scheme: str | None = None
) -> Federation:
    """Provision a loopback federation; every site gets its reference linear data, synthetic glioma cases, a site
    config."""
    project = customise(load_template(None), name=name, sites=sites, port=free_port(),
                        admins={ADMIN: "project_admin", SUPER_ADMIN: "super"}, scheme=scheme)
    federation = provision(project, workspace)
    for index, site in enumerate(sites, start=1):
        data = write_linear_site(workspace / "data" / site / "linear", index).parent
        brats = workspace / "data" / site / "brats"
        write_brats_site(brats, index, **CPU_DEMO_DATA)
        write_site_config(federation.kit(site), {"linear": str(data), "brats": str(brats)})
    return federation




@dataclass(frozen=True)
class DistributedFederation:
    """A federation made only by distributed provisioning: the lead's workspace and offline CA, and each
    participant's own folder (its request, with its private key, and its kit)."""

    federation: Federation
    lead: Path
    ca: Path
    fingerprint: str
    homes: dict[str, Path]  # participant -> its own folder

    def request_dir(self, name: str) -> Path:
        return self.homes[name] / "request"

    def server_kit(self) -> Path:
        return self.federation.kit(self.federation.server)


def _ok(code: int, command: list[str]) -> None:
    assert code == 0, f"{command} exited {code}"


def distributed_demo_federation(root: Path, name: str = "dist-federation", sites: list[str] = SITES,
                                admin: str = ADMIN) -> DistributedFederation:
    """Built only by the product's commands, as the admin guide walks them: `fl-provision init` and `server-kit`
    at the lead, `site-agent request` in each participant's own folder, `fl-provision approve`, `site-agent
    install-kit`; each site then gets its reference linear data and a site config. The admin's role is `lead`
    (FLARE's distributed provisioning issues no project_admin)."""
    from provisioning.cli import main as fl_provision
    from site_agent.cli import main as site_agent
    from site_agent.kit.kit_policy import fingerprint

    lead, ca = root / "lead", root / "ca-medium"
    command = ["init", "--workspace", str(lead), "--ca-dir", str(ca), "--name", name, "--sites", ",".join(sites),
               "--admin", f"{admin}:lead", "--port", str(free_port())]
    _ok(fl_provision(command), command)
    root_ca = fingerprint((lead / "rootCA.pem").read_bytes())
    command = ["server-kit", "--workspace", str(lead), "--ca-dir", str(ca), "--out", str(root / "server")]
    _ok(fl_provision(command), command)
    project = yaml.safe_load((lead / "project.yml").read_text())
    server = next(p["name"] for p in project["participants"] if p["type"] == "server")
    kit_paths = {server: root / "server" / name / "prod_00" / server}
    homes = {}
    for entry in (p for p in project["participants"] if p["type"] in ("client", "admin")):
        home = homes[entry["name"]] = root / entry["name"]
        role = ["--role", entry["role"]] if entry["type"] == "admin" else []
        command = ["request", "--project", name, "--name", entry["name"], "--org", entry["org"], *role,
                   "--out", str(home / "request")]
        _ok(site_agent(command), command)
        command = ["approve", str(home / "request" / f"{entry['name']}.request.zip"), "--workspace", str(lead),
                   "--ca-dir", str(ca), "--server-kit", str(kit_paths[server])]
        _ok(fl_provision(command), command)
        command = ["install-kit", str(lead / "approved" / f"{entry['name']}.approved.zip"), "--request-dir",
                   str(home / "request"), "--fingerprint", root_ca, "--workspace", str(home / "kits")]
        _ok(site_agent(command), command)
        kit_paths[entry["name"]] = home / "kits" / name / "prod_00" / entry["name"]
    federation = Federation(name, root / "server" / name / "prod_00", server, list(sites), {admin: "lead"},
                            kit_paths)
    for index, site in enumerate(sites, start=1):
        data = write_linear_site(root / "data" / site / "linear", index).parent
        write_site_config(federation.kit(site), {"linear": str(data)})
    return DistributedFederation(federation, lead, ca, root_ca, homes)


COUNT_KEYS = ("NUM_STEPS_CURRENT_ROUND", "num_samples", "num_train", "num_cases", "n_cases")
"""Meta keys that would carry a site's sample count (FLARE's and ours)."""


def in_the_clear(transfers: dict[str, Any]) -> list[str]:
    """Every answer the server received (transfers.json's `answer` of each row) that carries a float array (a model
    parameter) or a sample count in the clear, as 'round R SITE TASK: what'; [] when none does."""
    found = []
    for round_number, sites in transfers.get("rounds", {}).items():
        for site, rows in sites.items():
            for row in rows:
                answer = row.get("answer") or {}
                floats = [name for name, kind in answer.get("arrays", {}).items() if kind.startswith("float")]
                counts = [key for key in answer.get("meta", []) if key in COUNT_KEYS]
                if floats or counts:
                    found.append(f"round {round_number} {site} {row['task']}: {floats[:3]} {counts}")
    return found


JOB_FILES = ["app/config/config_fed_client.json", "app/config/config_fed_server.json", "meta.json"]


@dataclass(frozen=True)
class ExportedJob:
    """An exported job folder as the FLARE console would receive it."""

    files: list[str]
    meta: dict
    client: dict  # config_fed_client.json
    server: dict  # config_fed_server.json

    @property
    def executor(self) -> dict:
        return self.client["executors"][0]["executor"]

    @property
    def workflow(self) -> dict:
        return self.server["workflows"][0]

    def site_classes(self) -> list[str]:
        return ([e["executor"]["path"] for e in self.client["executors"]]
                + [c["path"] for c in self.client["components"]])

    def server_classes(self) -> list[str]:
        return [w["path"] for w in self.server["workflows"]] + [c["path"] for c in self.server["components"]]


def read_exported_job(job_dir: Path) -> ExportedJob:
    config = job_dir / "app" / "config"
    return ExportedJob(
        files=sorted(str(p.relative_to(job_dir)) for p in job_dir.rglob("*") if p.is_file()),
        meta=json.loads((job_dir / "meta.json").read_text()),
        client=json.loads((config / "config_fed_client.json").read_text()),
        server=json.loads((config / "config_fed_server.json").read_text()),
    )


def over_the_wire(model: FLModel) -> FLModel:
    """Serialise as FLARE does (FOBS) and read back what the other side receives."""
    common_decomposers.register()
    return FLModelUtils.from_shareable(fobs.loads(fobs.dumps(FLModelUtils.to_shareable(model))))


class FedKTRelay:
    """The FedKT-CSD server's side of the wire in-process, driving the server's own secure-sum sequence: every task
    goes through FLARE's serialisation both ways, and `lost` sites stop answering from the named task on (as a
    killed site would)."""

    ORDER = ("keys", "shares", "statistics", "unmask")

    def __init__(self, tasks: dict[str, Any], contexts: dict[str, Any], lost: dict[str, str] | None = None):
        self.tasks, self.contexts, self.lost = tasks, contexts, lost or {}
        self.sent: dict[str, dict[str, FLModel]] = {}

    def send(self, task: str, model: FLModel, targets: list[str] | None) -> dict[str, FLModel]:
        answering = [s for s in targets or sorted(self.tasks)
                     if s not in self.lost or self.ORDER.index(task) < self.ORDER.index(self.lost[s])]
        self.sent[task] = {s: over_the_wire(getattr(self.tasks[s], f"task_{task}")(over_the_wire(model),
                                                                                     self.contexts[s]))
                           for s in answering}
        return self.sent[task]

    def secure_sum(self, announcement: FLModel, min_sites: int = 3) -> np.ndarray:
        session = announcement.meta["session"]
        return secure_statistics(SecureAggregation(session, min_sites), announcement.meta, self.send, print, print)


def server_results(federation: Federation, job_id: str) -> dict[str, Any]:
    """The job's results.json as the server writes it after every round (empty before the first)."""
    path = federation.kit(federation.server) / job_id / "app_server" / "results.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def wait_for_rounds(federation: Federation, job_id: str, rounds: int, timeout: float = 120.0) -> None:
    """Return once the server has recorded `rounds` completed rounds of the job (polled every 200 ms)."""
    deadline = time.monotonic() + timeout
    while len(server_results(federation, job_id).get("rounds", [])) < rounds:
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} did not complete {rounds} rounds within {timeout:.0f} s")
        time.sleep(0.2)


def wait_for_server_log(federation: Federation, job_id: str, text: str, timeout: float = 180.0) -> None:
    """Return as soon as the server's log of the job shows `text` (polled every 50 ms): the moment to strike."""
    log = federation.kit(federation.server) / job_id / "log.txt"
    deadline = time.monotonic() + timeout
    while not (log.is_file() and text in log.read_text(errors="replace")):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the server log of job {job_id} did not show {text!r} within {timeout:.0f} s")
        time.sleep(0.05)


def connected_sites(loopback: LoopbackFederation, admin: str = ADMIN) -> set[str]:
    """The sites the server lists as connected now, asked through an admin session."""
    session = loopback.session(admin)
    try:
        return {c.name for c in session.get_connected_client_list()}
    finally:
        session.close()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `condition` every 0.5 s; TimeoutError saying `what` did not happen within `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:.0f} s")
        time.sleep(0.5)


def submit(session: Session, job_dir: Path) -> str:
    """Submit an exported job through the FLARE API; its id."""
    return str(session.submit_job(str(job_dir)))


def abort_running(session: Session, job_id: str, timeout: float = 120.0) -> None:
    """Abort the job once FLARE lists it RUNNING, as an admin who sees it running would. Until every site has
    answered the job's start, FLARE lists it DISPATCHED, even while its processes run and the server's has sent
    tasks, and an abort then only marks it aborted "before running it": nothing the job would record of its
    abort is written."""
    deadline = time.monotonic() + timeout
    while (status := session.get_job_meta(job_id).get("status")) != "RUNNING":
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} was not RUNNING within {timeout:.0f} s (last {status})")
        time.sleep(0.1)
    session.abort_job(job_id)
