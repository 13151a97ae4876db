"""The WAN test bed: a provisioned federation whose sites each sit in a network namespace behind an emulated link
(tests/harness/wan.py: veth + `tc tbf`, or TUN devices with the userspace link emulator for delay and loss), the
server in the root namespace, jobs submitted and followed through the FLARE API as `fl-job submit` does. Each case's
time is reported as a ratio to the LAN run of the same job in the same run (the same namespaces and link kind, links
unlimited).

Cases (the issue's table):

- `lan`: every link unlimited (the reference for the ratios), fedavg-linear (20 rounds) and segmentation (demo);
- `site-down-30s`: site-2's link down 30 s in round 3, min_clients 2 of 3 (fedavg-linear);
- `site-down-30s-all`: the same with min_clients = all 3;
- `server-links-down-60s`: every site's link down 60 s (the coordinating centre's firewall reload);
- `site-1mbit` / `site-2mbit`: site-3 on a 1 or 2 Mbit/s link, one round of segmentation with the BraTS-size
  SegResNet (18.8 MB of float32 weights) on 16^3 crops of the demo's cases, so that the transfer dominates;
- `delay-loss-*`: 100 ms +- 25 ms each way (a 200 ms +- 50 ms round trip) and 2% loss each way on every site's
  link, fedavg-linear and segmentation (demo);
- `loss10-to-site-*` / `loss10-both-*`: 10% loss on site-2's link towards the site, or both ways.

The delay and loss cases need the emulator link (`--link emulator`; `auto`, the default, takes it when a chosen case
needs it, else tbf); their LAN references then run on emulator links too.

    sudo .venv/bin/python bench/wan_testbed.py --cases lan-segmentation-19mb site-2mbit [--comm-config flare-default]
    sudo .venv/bin/python bench/wan_testbed.py --write-readme            # every case; the table in bench/README.md
    sudo .venv/bin/python bench/wan_testbed.py --cases lan-linear delay-loss-linear lan-linear   # emulator links

`--comm-config flare-default` runs the kits without the streaming settings fl-provision writes
(provisioning.policy.COMM_CONFIG), to show what they change.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import source_checkout  # noqa: F401  (sys.path: research/ and tests/harness/ of this checkout)
from harness.wan import LINK_KINDS, EmulatedLink, namespaces_unavailable

from federation_tools.admin import follow_job
from federation_tools.loopback import LoopbackFederation, free_port
from fl_contract.params import JobParams
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND as LINEAR
from jobs.fedavg_linear.spec import FedAvgLinearParams
from jobs.segmentation.spec import CPU_DEMO, CPU_DEMO_DATA, SegmentationParams
from jobs.segmentation.spec import KIND as SEGMENTATION
from jobs.spec import JobKind
from provisioning.provision import Federation, customise, load_template, provision
from server_app.transfers import describe, read_transfers
from site_agent.data.demo.linear_demo import write_linear_site
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.kit.site_config import write_site_config

ADMIN = "admin@wan.org"
SITES = ["site-1", "site-2", "site-3"]
BRATS_SIZE_MODEL: dict[str, Any] = {"init_filters": 16, "blocks_down": (1, 2, 2, 4), "blocks_up": (1, 1, 1)}
"""SegResNet at its BraTS defaults (18.8 MB of float32 weights); run on 16^3 crops of the demo's cases, one round
(train, validate, test: the model goes to each site three times and comes back once), so the transfer dominates."""


@dataclass
class WanFederation:
    """A provisioned federation, its server in the root namespace and each site behind its own EmulatedLink."""

    federation: Federation
    loopback: LoopbackFederation
    link_kind: str
    links: dict[str, EmulatedLink] = field(default_factory=dict)

    def session(self) -> Any:
        return self.loopback.session(ADMIN)


def provision_wan_federation(workspace: Path, comm_config: bool = True) -> Federation:
    project = customise(load_template(None), name="wan", sites=SITES, port=free_port(), admins={ADMIN: "project_admin"})
    federation = provision(project, workspace)
    for index, site in enumerate(SITES, start=1):
        linear = write_linear_site(workspace / "data" / site / "linear", index).parent
        brats = workspace / "data" / site / "brats"
        write_brats_site(brats, index, **CPU_DEMO_DATA)
        write_site_config(federation.kit(site), {"linear": str(linear), "brats": str(brats)})
    if not comm_config:
        for name in (federation.server, *SITES):
            (federation.kit(name) / "local" / "comm_config.json").unlink(missing_ok=True)
    return federation


@contextmanager
def wan_federation(workspace: Path, comm_config: bool = True, link_kind: str = "tbf") -> Iterator[WanFederation]:
    """Server up in the root namespace, every site in its own namespace behind a `link_kind` link (unlimited), all
    registered; on the way out (also on failure) the sites and server are stopped, then the links removed."""
    federation = provision_wan_federation(workspace, comm_config)
    port = int(json.loads((federation.kit(SITES[0]) / "startup" / "fed_client.json").read_text())["servers"][0]
               ["service"]["target"].rsplit(":", 1)[1])
    with ExitStack() as stack:
        loopback = stack.enter_context(LoopbackFederation(federation))
        loopback.start_server()
        wan = WanFederation(federation, loopback, link_kind)
        for site in SITES:
            wan.links[site] = stack.enter_context(EmulatedLink(relay_ports=(port,), kind=link_kind))
            loopback.start_site(site, prefix=tuple(wan.links[site].command()))
        loopback.wait_for_sites(ADMIN, SITES, timeout=120)
        yield wan


def _linear(rounds: int = 20, min_clients: int = 3) -> tuple[JobKind[Any], JobParams]:
    return LINEAR, FedAvgLinearParams(num_rounds=rounds, min_clients=min_clients)


def _segmentation(model: dict[str, Any] | None = None, rounds: int = 2) -> tuple[JobKind[Any], JobParams]:
    return SEGMENTATION, SegmentationParams(**{**CPU_DEMO, **(model or {}), "num_rounds": rounds, "min_clients": 3,
                                               "tracking": False})


def _segmentation_19mb(rounds: int = 1) -> tuple[JobKind[Any], JobParams]:
    return _segmentation({**BRATS_SIZE_MODEL, "roi_size": (16, 16, 16)}, rounds)


@dataclass(frozen=True)
class Case:
    name: str
    condition: str
    job: Callable[[], tuple[JobKind[Any], JobParams]]
    reference: str  # the lan job whose time this case is a ratio to
    during: Callable[[WanFederation, str], None] = lambda wan, job_id: None
    rate_mbit: dict[str, float] = field(default_factory=dict)
    link: dict[str, dict[str, float]] = field(default_factory=dict)  # per site: delay and loss (emulator links)

    @property
    def needs_emulator(self) -> bool:
        return bool(self.link)


def _after_round(wan: WanFederation, job_id: str, done: int, timeout: float = 300.0) -> None:
    """Wait until the server's results.json for the job records `done` completed rounds."""
    path = wan.federation.kit(wan.federation.server) / job_id / "app_server" / "results.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if len(json.loads(path.read_text()).get("rounds", [])) >= done:
                return
        except (OSError, ValueError):  # not written yet, or being replaced
            pass
        time.sleep(0.2)


def _outage(sites: list[str], seconds: float, after_rounds: int = 2) -> Callable[[WanFederation, str], None]:
    def run(wan: WanFederation, job_id: str) -> None:
        _after_round(wan, job_id, after_rounds)
        with ExitStack() as stack:
            for site in sites:
                stack.enter_context(wan.links[site].down())
            time.sleep(seconds)
    return run


DELAY_LOSS = {"delay_ms": 100.0, "jitter_ms": 25.0, "loss_to_site": 0.02, "loss_from_site": 0.02}
DELAY_LOSS_CONDITION = "100 ms +- 25 ms each way (200 ms +- 50 ms round trip) and 2% loss each way on every site link"
LOSSY = "site-2"

CASES = [
    Case("lan-linear", "every link unlimited (LAN)", _linear, "lan-linear"),
    Case("lan-segmentation", "every link unlimited (LAN)", _segmentation, "lan-segmentation"),
    Case("lan-segmentation-19mb", "every link unlimited (LAN), BraTS-size model", _segmentation_19mb,
         "lan-segmentation-19mb"),
    Case("site-down-30s", "site-2's link down 30 s (min_clients 2 of 3)", lambda: _linear(min_clients=2),
         "lan-linear", _outage(["site-2"], 30)),
    Case("site-down-30s-all", "site-2's link down 30 s, min_clients = all 3", _linear, "lan-linear",
         _outage(["site-2"], 30)),
    Case("server-links-down-60s", "every site's link down 60 s", _linear, "lan-linear", _outage(SITES, 60)),
    Case("site-2mbit", "site-3 on a 2 Mbit/s link, BraTS-size model", _segmentation_19mb, "lan-segmentation-19mb",
         rate_mbit={"site-3": 2.0}),
    Case("site-1mbit", "site-3 on a 1 Mbit/s link, BraTS-size model", _segmentation_19mb, "lan-segmentation-19mb",
         rate_mbit={"site-3": 1.0}),
    Case("delay-loss-linear", DELAY_LOSS_CONDITION, _linear, "lan-linear", link=dict.fromkeys(SITES, DELAY_LOSS)),
    Case("delay-loss-segmentation", DELAY_LOSS_CONDITION, _segmentation, "lan-segmentation",
         link=dict.fromkeys(SITES, DELAY_LOSS)),
    Case("loss10-to-site-linear", f"10% loss on {LOSSY}'s link towards the site", _linear, "lan-linear",
         link={LOSSY: {"loss_to_site": 0.1}}),
    Case("loss10-to-site-segmentation", f"10% loss on {LOSSY}'s link towards the site", _segmentation,
         "lan-segmentation", link={LOSSY: {"loss_to_site": 0.1}}),
    Case("loss10-both-linear", f"10% loss on {LOSSY}'s link both ways", _linear, "lan-linear",
         link={LOSSY: {"loss_to_site": 0.1, "loss_from_site": 0.1}}),
    Case("loss10-both-segmentation", f"10% loss on {LOSSY}'s link both ways", _segmentation, "lan-segmentation",
         link={LOSSY: {"loss_to_site": 0.1, "loss_from_site": 0.1}}),
]
_CLEAR = {"delay_ms": 0.0, "jitter_ms": 0.0, "loss_to_site": 0.0, "loss_from_site": 0.0, "mbit": 0.0}


def run_case(wan: WanFederation, case: Case, jobs_dir: Path, timeout: float = 1800.0) -> dict[str, Any]:
    kind, params = case.job()
    job_dir = export(build_job(kind, params), jobs_dir / case.name)
    for site, link in wan.links.items():
        link.set_conditions(**{**_CLEAR, **case.link.get(site, {}), "mbit": case.rate_mbit.get(site, 0.0)})
    counters_before = _counters(wan)
    session = wan.session()
    try:
        start = time.monotonic()
        job_id = session.submit_job(str(job_dir))
        during = threading.Thread(target=case.during, args=(wan, job_id), daemon=True)
        during.start()
        outcome = follow_job(session, job_id, timeout=timeout, progress=None)
        elapsed = time.monotonic() - start
        during.join(timeout=300)
    finally:
        session.close()
        counters = _counters(wan, counters_before)
        for link in wan.links.values():
            link.set_conditions(**_CLEAR)
    results = outcome.results() if outcome.completed else {}
    rounds = results.get("rounds", [])
    return {"case": case.name, "condition": case.condition, "kind": kind.name, "job_id": job_id,
            "status": results.get("status", outcome.status), "error": results.get("error", ""),
            "seconds": elapsed, "rounds": len(rounds),
            "sites_per_round": [sorted(r.get("sites", [])) for r in rounds],
            "waited": [r.get("waited_for_sites") for r in rounds if r.get("waited_for_sites")],
            "links": describe(read_transfers(outcome.server_app_dir())) if outcome.result_dir else [],
            "reference": case.reference, "link_kind": wan.link_kind, "packets": counters}


def _counters(wan: WanFederation, before: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per site, the emulator's packet counters per direction and its CPU seconds (since `before`); empty for tbf
    links."""
    if wan.link_kind != "emulator":
        return {}
    now: dict[str, dict[str, Any]] = {}
    for site, link in wan.links.items():
        now[site] = {d: asdict(c) for d, c in link.counters().items()}
        now[site]["cpu_s"] = link.emulator_cpu_seconds()
    if before is None:
        return now
    for site, fields in now.items():
        for name, value in fields.items():
            fields[name] = value - before[site][name] if name == "cpu_s" else {
                k: v - before[site][name][k] for k, v in value.items()}
    return now


def _notes(row: dict[str, Any]) -> str:
    """Which sites missed which rounds, whom a round waited for, and site-3's link line (segmentation)."""
    notes = []
    for site in SITES:
        missed = [i + 1 for i, sites in enumerate(row["sites_per_round"]) if site not in sites]
        if missed:
            notes.append(f"{site} absent from rounds {missed[0]}-{missed[-1]} ({len(missed)})")
    notes += [f"waited for {site} {seconds:.0f} s" for waited in row["waited"] for site, seconds in waited.items()]
    slow = SITES[-1]  # the site the bandwidth cases slow down; fedavg-linear's 8-byte rows say nothing
    notes += [line for line in row.get("links", []) if line.startswith(f"{slow}:")
              and not line.startswith(f"{slow}: 0.0 MB") and not row.get("packets")]
    if row.get("packets"):  # emulator links: each site's transfer time, beside the others' under the same load
        network = [m.groups() for line in row.get("links", []) if (m := re.match(r"(site-\d+): .*, (\d+) s on", line))]
        notes.append("on the network: " + ", ".join(f"{site} {seconds} s" for site, seconds in network))
    for site, directions in row.get("packets", {}).items():  # what the loss took
        lost = [f"{c['dropped_loss']} of {c['received']} packets {d.replace('_', ' ')} lost"
                for d, c in directions.items() if d != "cpu_s" and c["dropped_loss"]]
        if lost:
            notes.append(f"{site}: {', '.join(lost)}")
    cpu = sum(directions.get("cpu_s", 0.0) for directions in row.get("packets", {}).values())
    if cpu:
        notes.append(f"the 3 emulators used {cpu:.1f} s of CPU")
    return "; ".join(notes) or "every site in every round"


def table(rows: list[dict[str, Any]]) -> str:
    """One line per case run; a ratio is to the mean of the reference case's runs in `rows` (`--cases` may name a
    LAN case before and after the others, so that a load that changes during the run shows)."""
    runs: dict[str, list[float]] = {}
    for r in rows:
        runs.setdefault(r["case"], []).append(r["seconds"])
    times = {case: sum(seconds) / len(seconds) for case, seconds in runs.items()}
    lines = ["| case | link condition | job | status | rounds | time (s) | ratio to LAN | what happened |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        ratio = f"{r['seconds'] / times[r['reference']]:.2f}x" if r["reference"] in times else "n/a"
        condition = r["condition"] + (" (emulator links)" if r.get("link_kind") == "emulator" else "")
        lines.append(f"| {r['case']} | {condition} | {r['kind']} | {r['status']} | {r['rounds']} | "
                     f"{r['seconds']:.0f} | {ratio} | {_notes(r)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=[c.name for c in CASES], choices=[c.name for c in CASES])
    parser.add_argument("--comm-config", choices=("kit", "flare-default"), default="kit")
    parser.add_argument("--link", choices=("auto", *LINK_KINDS), default="auto",
                        help="the sites' link kind (auto: the emulator if a chosen case has delay or loss, else tbf)")
    parser.add_argument("--workspace", type=Path)
    parser.add_argument("--json", type=Path, help="write every case's row here")
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop = clean up: processes, namespaces
    by_name = {c.name: c for c in CASES}
    cases = [by_name[name] for name in args.cases]  # in the order given; a case named twice runs twice
    link_kind = args.link if args.link != "auto" else "emulator" if any(c.needs_emulator for c in cases) else "tbf"
    if link_kind == "tbf" and any(c.needs_emulator for c in cases):
        parser.error(f"cases {[c.name for c in cases if c.needs_emulator]} emulate delay or loss: --link emulator")
    reason = namespaces_unavailable(link_kind)
    if reason:
        print(f"cannot run the WAN test bed here: {reason}", file=sys.stderr)
        return 2
    workspace = args.workspace or Path(tempfile.mkdtemp(prefix="wan-testbed-"))
    rows = []
    try:
        with wan_federation(workspace, comm_config=args.comm_config == "kit", link_kind=link_kind) as wan:
            for case in cases:
                row = run_case(wan, case, workspace / "jobs")
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        if args.workspace is None:
            shutil.rmtree(workspace, ignore_errors=True)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.write_readme:
        from readme_section import write_section

        write_section("wan_testbed", table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
