"""`site-agent check`: site IT's preflight. Every check prints one row; any FAIL exits non-zero with the fix."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from site_agent import __version__
from site_agent.kit.link import LinkNotMeasured, job_models, mbit_s, measure_link, seconds
from site_agent.kit.site_config import SiteConfig, SiteConfigError
from site_agent.kit.startup import (
    EXPIRY_WARNING_DAYS,
    KitError,
    ProxyRefused,
    ServerRefused,
    SiteKit,
    certificate_organisation,
    exchange_with_server,
    verify_certificate_chain,
)
from site_agent.privacy.job_contents import SITE_DEPLOYER_PATH
from site_agent.privacy.policy import PolicyInForce
from site_agent.privacy.site_guard import SITE_GUARD_PATH

if TYPE_CHECKING:  # torch takes seconds to import: the fast commands never load it
    from fl_contract.device import GpuFacts

MIN_FREE_GIB = 2.0
WARN_FREE_GIB = 20.0
MIN_FREE_GPU_GIB = 4.0
WARN_ROUND_TRANSFER_S = 120.0
"""A round whose model transfer (to the site and back, at the measured upload rate) takes longer is warned about."""

OK, WARN, FAIL = "OK", "WARN", "FAIL"
LAST_CHECK_FILE = "last_check.json"
"""`site-agent check` keeps its rows here (in the kit's local/): the status page shows the link and data rows."""
_FIX_CONFIG = "edit the site configuration (docs/site-it-guide.md)"
_FIX_DATA = "fix or remove what each line names, as it says (docs/site-data.md)"
_READ_ALL = "; `--deep` reads every case and image, listing each bad one"
_BAR_WIDTH = 30

DataProgress = Callable[[str, int, int], None]
"""Called with (dataset key, items read, items to read) while the data check reads."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str
    detail: str
    fix: str = ""
    problems: tuple[str, ...] = ()
    """Every bad file the check found, each naming the file and why: listed under the table."""
    transient: bool = False
    """A FAIL that may clear by itself (the server is down): `site-agent start` exits so that its service retries."""


def check_certificate(kit: SiteKit) -> CheckResult:
    try:
        report = verify_certificate_chain(kit.certificate, kit.private_key, kit.root_ca, site_name=kit.site_name)
    except KitError as exc:
        return CheckResult("certificate", FAIL, str(exc), "ask the federation lead for this site's startup kit")
    detail = (f"{report.subject} issued by {report.issuer}, valid until {report.not_after:%Y-%m-%d} "
              f"({report.days_left} days)")
    if report.days_left < EXPIRY_WARNING_DAYS:
        org = certificate_organisation(kit.certificate)
        return CheckResult("certificate", WARN, detail,
                           f"renew it before it expires: site-agent request --project {report.issuer} --name "
                           f"{report.subject} --org {org} --out NEW_FOLDER, send the request zip to the federation "
                           "lead, then site-agent install-kit APPROVED_ZIP --request-dir NEW_FOLDER --fingerprint "
                           f"ROOT_CA_FINGERPRINT --renew {kit.root} (docs/site-it-guide.md; a kit the lead made "
                           "with every key: ask the lead for a new one)")
    return CheckResult("certificate", OK, detail)


def check_server(kit: SiteKit, timeout: float = 5.0) -> CheckResult:
    """Mutual TLS with the server, then an exchange of data: only the server's answer after the handshake proves
    that it accepts this site's certificate (TLS 1.3 finishes the site's side of the handshake before that check)."""
    where = f"{kit.server_host}:{kit.server_port}" + (f" (through the proxy {kit.proxy})" if kit.proxy else "")
    if kit.proxy and kit.scheme != "grpc":
        return CheckResult("server", FAIL, f"a proxy ({kit.proxy}) is configured, but this kit's FLARE transport is "
                           f"{kit.scheme!r}, which does not go through an HTTP proxy",
                           "ask the federation lead for a kit with the grpc scheme (fl-provision --scheme grpc), "
                           "or remove the proxy (site-agent configure --proxy none) where the server is reachable")
    try:
        answer = exchange_with_server(kit, timeout)
    except ProxyRefused as exc:
        return CheckResult("server", FAIL, str(exc), "the site reaches the server only through its proxy",
                           transient=True)
    except ServerRefused as exc:
        return CheckResult("server", FAIL, f"{where} refused this site's certificate: {exc}",
                           "the server does not trust this certificate. If the certificate row is OK, the kit predates "
                           "the server's current provisioning or this machine's clock differs from the server's: "
                           "ask the federation lead for this site's current kit")
    except ssl.SSLError as exc:
        return CheckResult("server", FAIL, f"TLS handshake with {where} failed: {exc.reason or exc}",
                           "the server was provisioned by another project or the kit is not this federation's")
    except TimeoutError:
        return CheckResult("server", FAIL, f"{where} did not answer within {timeout:.0f} s",
                           "check that the server runs and that no firewall or proxy holds the connection",
                           transient=True)
    except OSError as exc:
        return CheckResult("server", FAIL, f"cannot reach {where}: {exc}",
                           "check that the server runs, the address resolves and the firewall allows the port",
                           transient=True)
    if kit.server_identity not in answer.names:
        return CheckResult("server", FAIL,
                           f"{where} presents certificate {answer.names}, expected {kit.server_identity!r}",
                           "the address points to another server; check DNS / the kit")
    if not answer.reply:
        return CheckResult("server", WARN, f"{where}: mutual TLS with {kit.server_identity} completed; FLARE's "
                           f"{kit.scheme!r} transport gives no answer that proves it accepts this site's certificate",
                           "`site-agent start` waits for the site's registration and names a refusal")
    return CheckResult("server", OK, f"{where}: {kit.server_identity} accepted this site's certificate "
                       f"(answered {answer.reply} after mutual TLS)")


def check_link(kit: SiteKit) -> CheckResult:
    """Round trip and upload rate to the server after mutual TLS (site_agent.kit.link), and how long a round's transfer
    of each job kind's default model the site runs would take at that rate; warns above WARN_ROUND_TRANSFER_S."""
    where = f"{kit.server_host}:{kit.server_port}"
    try:
        link = measure_link(kit)
    except LinkNotMeasured as exc:
        return CheckResult("link", WARN, f"{where}: not measured: {exc}",
                           "provision with the default http scheme to have the link measured")
    except (OSError, KitError) as exc:  # ssl.SSLError and TimeoutError are OSErrors; the server row says more
        return CheckResult("link", FAIL, f"{where}: the link check failed: {exc or type(exc).__name__}",
                           "see the server row; a link that drops a short exchange drops jobs' transfers too",
                           transient=True)
    site = PolicyInForce.read(kit.root / "local")
    rounds = {kind: 2 * size for kind, size in
              job_models(site.policy.allowed_job_kinds if site.policy else ()).items()}
    times = {kind: link.transfer_s(size) for kind, size in rounds.items()}
    detail = link.describe() + "".join(
        f"; a {kind} round moves {rounds[kind] / 1e6:.0f} MB: ~{seconds(times[kind])}" for kind in sorted(rounds))
    slow = sorted(kind for kind, seconds in times.items() if seconds > WARN_ROUND_TRANSFER_S)
    if slow:
        return CheckResult("link", WARN, detail,
                           f"at {mbit_s(link.upload_bytes_per_s)} each round of {', '.join(slow)} spends more than "
                           f"{WARN_ROUND_TRANSFER_S:.0f} s on the network; the site still takes part (the kits' "
                           "timeouts allow slow links, docs/admin-guide.md#slow-links), but ask the network team for "
                           "more upload bandwidth or a route that avoids the slow hop")
    return CheckResult("link", OK, detail)


def check_policy(kit: SiteKit) -> CheckResult:
    """The settings that keep submitted code out of the site (exact allow-list in enforce mode, the guard, the deployer,
    no local/custom) live in files site IT can edit: a kit changed by hand loses them without any job failing, so the
    preflight looks."""
    path = kit.root / "local" / "resources.json"
    if not path.is_file():
        return CheckResult("site policy", FAIL, f"{path} missing",
                           "provision the kit with `fl-provision` (it writes the policy)")
    resources = json.loads(path.read_text())
    problems = []
    if resources.get("class_list_enforcement_mode") != "enforce":
        problems.append("class allow-list is not in enforce mode")
    if any(not entry.count(".") or entry.endswith((".", "*")) for entry in resources.get("class_allow_list", [])):
        problems.append("allow-list has package prefixes instead of exact classes")
    if not any(c.get("path") == SITE_GUARD_PATH for c in resources.get("components", [])):
        problems.append("site guard is not configured")
    if not any(c.get("id") == "app_deployer" and c.get("path") == SITE_DEPLOYER_PATH
               for c in resources.get("components", [])):
        problems.append("site deployer (app_deployer, which refuses jobs that carry code) is not configured")
    if (kit.root / "local" / "custom").exists():
        problems.append(f"{kit.root / 'local' / 'custom'} exists (FLARE puts it first on the Python path)")
    if problems:
        return CheckResult("site policy", FAIL, f"{path}: " + "; ".join(problems),
                           "re-provision, or remove local/custom")
    detail = f"allow-list enforced ({len(resources['class_allow_list'])} classes), site guard and deployer on"
    missing = _classes_missing_from(resources["class_allow_list"])
    if missing:
        return CheckResult("site policy", WARN, f"{detail}; jobs using {missing} will be refused",
                           "this agent has job kinds the kit's allow-list predates: "
                           "ask the lead for a re-provisioned kit")
    return CheckResult("site policy", OK, detail)


def check_private_key(kit: SiteKit) -> CheckResult:
    """The site's key opens its mutual-TLS identity: nobody but the service account may read it."""
    if not kit.private_key.is_file():
        return CheckResult("private key", FAIL, f"{kit.private_key}: not found",
                           "ask the federation lead for this site's kit")
    mode = kit.private_key.stat().st_mode & 0o777
    if mode & 0o077:
        return CheckResult("private key", FAIL, f"{kit.private_key} is readable by group or others (mode {mode:o})",
                           f"chmod 600 {kit.private_key} and chmod 700 {kit.startup}")
    return CheckResult("private key", OK, f"{kit.private_key} readable by its owner only (mode {mode:o})")


def check_file_modes(kit: SiteKit) -> CheckResult:
    """Everything in the kit (configs, policy, ledger, audit log, logs, job workspaces) and the records folder, when
    the policy puts it elsewhere, readable by the service account only: they name data folders and what ran here."""
    site = PolicyInForce.read(kit.root / "local")
    roots = [kit.root] + ([site.records] if site.records.is_dir() and not site.records.is_relative_to(kit.root) else [])
    open_paths = [path for root in roots for path in [root, *root.rglob("*")]
                  if not path.is_symlink() and path.stat().st_mode & 0o077]
    if open_paths:
        shown = (", ".join(str(p) for p in open_paths[:3])
                 + (f" and {len(open_paths) - 3} more" if open_paths[3:] else ""))
        return CheckResult("file modes", FAIL,
                           f"{len(open_paths)} files or folders readable by group or others: {shown}",
                           f"chmod -R go-rwx {' '.join(str(r) for r in roots)}, and start the site with `site-agent "
                           "start` or its service unit (they start FLARE with umask 077)")
    return CheckResult("file modes", OK, f"everything under {', '.join(str(r) for r in roots)} is the owner's only")


def check_privacy_policy(kit: SiteKit) -> CheckResult:
    """The policy in force for the next job (site_agent.privacy.policy), and where its records go."""
    site = PolicyInForce.read(kit.root / "local")
    if site.policy is None:
        return CheckResult("privacy policy", FAIL, site.problem,
                           "restore local/site_policy.json from the kit the lead sent")
    return CheckResult("privacy policy", OK, f"{site.policy.describe()}; ledger and audit log in {site.records}")


def _classes_missing_from(allow_list: list[str]) -> list[str]:
    """Site tasks of the installed agent that the kit's allow-list does not admit (the kit is older than the agent)."""
    from site_agent.tasks import installed_task_classes

    return [c for c in installed_task_classes() if c not in allow_list]


def check_data(kit: SiteKit, deep: bool = False, progress: DataProgress | None = None) -> list[CheckResult]:
    """One row per dataset key of the site config ("data KEY"): what its folder holds, told by its content, with
    counts, after reading one case or image (`deep`: every one) as the jobs read them."""
    try:
        config = SiteConfig.for_kit(kit.root)
    except SiteConfigError as exc:
        return [CheckResult("data", FAIL, str(exc), _FIX_CONFIG)]
    if not config.datasets:
        return [CheckResult("data", FAIL, f"{config.path}: no datasets configured",
                            'add "datasets": {"name": "/path"}')]
    return [_check_dataset(config, kit.site_name, key, deep, progress) for key in config.datasets]


def _check_dataset(config: SiteConfig, site_name: str, key: str, deep: bool,
                   progress: DataProgress | None) -> CheckResult:
    """Reads each dataset folder the way a job will, so site IT finds a data problem before a job does; an empty folder
    is only a warning, since brats-inference writes its output into one."""
    from site_agent.data.inspection import KNOWN_CONTENT, SERIES_KIND, inspect_folder  # torch, MONAI, pydicom: seconds
    from site_agent.data.readers.reader import DataError

    name = f"data {key}"
    try:
        folder = config.data_dir(key, site_name)
    except SiteConfigError as exc:
        return CheckResult(name, FAIL, str(exc), _FIX_CONFIG)
    if not any(folder.iterdir()):  # an inference job's output folder starts empty; a data folder must not
        if not os.access(folder, os.W_OK):
            return CheckResult(name, FAIL, f"{folder}: empty and not writable by this user",
                               "copy the site's data there, or make it writable if a job writes its output there")
        return CheckResult(name, WARN, f"{folder}: empty; fine for an output folder (brats-inference writes its "
                           "label maps there)", "if this key names input data, copy or generate the site's data there")
    try:
        found = inspect_folder(folder, deep, None if progress is None else partial(progress, key))
    except DataError as exc:
        return CheckResult(name, FAIL, str(exc), _FIX_DATA + ("" if deep else _READ_ALL))
    if found is None:
        return CheckResult(name, WARN, f"{folder}: not checked, it holds none of {KNOWN_CONTENT}",
                           f"check that {key!r} points at the data folder itself, not a folder above it")
    detail = f"{folder}: {found.kind}, {found.summary}"
    if found.problems:
        return CheckResult(name, FAIL, f"{detail}; {len(found.problems)} problem(s) listed below",
                           _FIX_DATA + ("" if deep else _READ_ALL), tuple(found.problems))
    if found.kind == SERIES_KIND:  # read, but jobs read case folders of series, not one series
        return CheckResult(name, WARN, detail, f"{key!r} points at one series' slices: point it at the folder holding "
                           "the case folders (CASE/T1GD/*.dcm, docs/site-data.md)")
    return CheckResult(name, OK, detail)


def check_device(kit: SiteKit) -> CheckResult:
    """The device jobs will use: the GPU's name, memory, CUDA version and a short matmul in the precision training
    will use, or that there is no CUDA GPU and the CPU will be used."""
    import torch

    from fl_contract.device import probe_gpu, select_device
    from fl_contract.precision import select_precision

    try:
        preference = SiteConfig.for_kit(kit.root).device
    except SiteConfigError:
        preference = "auto"
    try:
        device = select_device(preference)
    except RuntimeError as exc:
        return CheckResult("device", FAIL, str(exc), 'set "device": "auto" or install a CUDA build of torch')
    if device.type != "cuda":
        if torch.cuda.is_available():
            return CheckResult("device", WARN, f'the site configuration says "device": "cpu" although torch sees '
                               f"{torch.cuda.get_device_name()}; will use the CPU ({torch.get_num_threads()} threads), "
                               f"torch {torch.__version__}", 'set "device": "auto" to train on the GPU')
        return CheckResult("device", OK, f"no CUDA GPU, will use the CPU ({torch.get_num_threads()} threads), "
                           f"torch {torch.__version__}")
    precision = select_precision(device)
    try:
        facts = probe_gpu(device, precision.autocast_dtype or torch.float32)
    except RuntimeError as exc:  # CUDA errors (driver too old, GPU in a bad state) are RuntimeErrors
        return CheckResult("device", FAIL, f"the GPU does not compute: {exc}",
                           "check the NVIDIA driver against the CUDA version of torch (docs/site-it-guide.md)")
    return gpu_result(facts, precision.describe(), torch.__version__)


def gpu_result(facts: GpuFacts, precision: str, torch_version: str) -> CheckResult:
    """The device row for a GPU, from its facts (so it is tested without one)."""
    detail = (f"{facts.name}, {facts.total_bytes / 2**30:.0f} GiB ({facts.free_bytes / 2**30:.1f} GiB free), "
              f"CUDA {facts.cuda_version}, compute capability {facts.capability[0]}.{facts.capability[1]}, "
              f"{precision}, matmul {facts.matmul_tflops:.0f} TFLOP/s, torch {torch_version}")
    if facts.free_bytes < MIN_FREE_GPU_GIB * 2**30:
        return CheckResult("device", WARN, detail, f"less than {MIN_FREE_GPU_GIB:.0f} GiB of GPU memory is free: "
                           "stop what else runs on the GPU (nvidia-smi lists it) or lower the jobs' "
                           "batch_size / roi_size")
    return CheckResult("device", OK, detail)


def check_disk(kit: SiteKit) -> CheckResult:
    free_gib = shutil.disk_usage(kit.root).free / 2**30
    detail = f"{free_gib:.1f} GiB free under {kit.root}"
    if free_gib < MIN_FREE_GIB:
        return CheckResult("disk", FAIL, detail,
                           f"free at least {MIN_FREE_GIB:.0f} GiB for job workspaces and checkpoints")
    if free_gib < WARN_FREE_GIB:
        return CheckResult("disk", WARN, detail, "segmentation checkpoints and logs need several GiB")
    return CheckResult("disk", OK, detail)


CHECKS: tuple[Callable[[SiteKit], CheckResult | list[CheckResult]], ...] = (
    check_certificate, check_private_key, check_file_modes, check_policy, check_privacy_policy, check_server,
    check_link, check_data, check_device, check_disk
)


def run_checks(
    kit_dir: Path, skip_server: bool = False, deep: bool = False, progress: DataProgress | None = None
) -> list[CheckResult]:
    """Every check's rows; `deep` makes the data check read every case and image (reporting to `progress`)."""
    try:
        kit = SiteKit.open(kit_dir)
    except KitError as exc:
        return [CheckResult("startup kit", FAIL, str(exc), "point --kit at the unpacked startup kit")]
    results = [CheckResult("startup kit", OK,
                           f"site {kit.site_name}, server {kit.server_host}:{kit.server_port}, agent {__version__}")]
    for check in CHECKS:
        if skip_server and check in (check_server, check_link):
            continue
        found = check_data(kit, deep, progress) if check is check_data else check(kit)
        results.extend(found if isinstance(found, list) else [found])
    return results


def save_check(kit_dir: Path, results: list[CheckResult]) -> None:
    """Keep `site-agent check`'s rows for the status page (written whole, readable by the service account only)."""
    local = Path(kit_dir) / "local"
    if not local.is_dir():
        return
    rows = [{"name": r.name, "status": r.status, "detail": r.detail, "fix": r.fix, "problems": len(r.problems)}
            for r in results]
    path = local / LAST_CHECK_FILE
    partial = path.with_suffix(".json.part")
    checked = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
        json.dump({"time": checked, "rows": rows}, handle, indent=1)
    partial.replace(path)


def format_table(results: list[CheckResult]) -> str:
    width = max(len(r.name) for r in results)
    lines = [f"{'CHECK'.ljust(width)}  STATUS  DETAIL"]
    lines += [f"{r.name.ljust(width)}  {r.status.ljust(6)}  {r.detail}" for r in results]
    for r in results:
        if r.problems:
            lines += ["", f"{r.name}: {len(r.problems)} problem(s):"] + [f"  {problem}" for problem in r.problems]
    fixes = [f"  {r.name}: {r.fix}" for r in results if r.status != OK and r.fix]
    if fixes:
        lines += ["", "To fix:"] + fixes
    return "\n".join(lines)


def progress_bar(stream: TextIO) -> DataProgress:
    """A bar per dataset key, redrawn in place on `stream`: `data isic [#########.....] 120/400`."""

    def show(key: str, done: int, total: int) -> None:
        filled = _BAR_WIDTH * done // total
        stream.write(f"\rdata {key} [{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] {done}/{total}")
        stream.write("\n" if done == total else "")
        stream.flush()

    return show


def _run(args: argparse.Namespace) -> int:
    progress = progress_bar(sys.stderr) if args.deep else None
    results = run_checks(Path(args.kit), skip_server=args.skip_server, deep=args.deep, progress=progress)
    save_check(Path(args.kit), results)
    print(format_table(results))
    failed = [r.name for r in results if r.status == FAIL]
    print(f"\n{'FAILED: ' + ', '.join(failed) if failed else 'all checks passed'}")
    return 1 if failed else 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("check", help="preflight: startup kit, certificates and key, site and privacy "
                                                 "policy, server, data, device, disk")
    parser.add_argument("--kit", required=True, help="folder of this site's startup kit")
    parser.add_argument("--skip-server", action="store_true", help="do not contact the server (e.g. before it runs)")
    parser.add_argument("--deep", action="store_true",
                        help="read every case and image of every dataset (not just one), listing each bad file")
    parser.set_defaults(func=_run)
