"""`fl-job`: build a job folder for the FLARE console, submit it through the FLARE API, or try it in the simulator.

    fl-job export fedavg-linear --out jobs-out/ [--num-rounds 5 ...]      then, in the console:
                                                                          submit_job jobs-out/fedavg-linear
    fl-job submit fedavg-linear --admin-kit KIT [--num-rounds 5 ...]      waits, shows progress, downloads the result
    fl-job simulate fedavg-linear --workspace WS --data linear=/data/{site_name}/linear --sites site-1,site-2,site-3
    fl-job status --admin-kit KIT [--serve]                               the sites and jobs; a page with /metrics
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from fl_contract.params import params_to_json
from jobs.cli_options import add_parameter_options, params_from_args
from jobs.registry import job_kind, kinds

if TYPE_CHECKING:
    from federation_tools.admin import JobOutcome


def _build(args: argparse.Namespace, out_dir: Path) -> Path:
    from jobs.common import build_job, export

    kind = job_kind(args.kind)
    params = params_from_args(kind, args, args.parser)
    if getattr(args, "data_summary", None):
        _warn_from_summary(Path(args.data_summary), params_to_json(params))
    return export(build_job(kind, params), out_dir)


def _warn_from_summary(path: Path, plan: dict[str, object]) -> None:
    """Each flag of a data-summary job's results that concerns a job with these parameters, before it is built."""
    from fl_contract.data_summary import plan_warnings
    from reports.segmentation import load_results

    warnings = plan_warnings(load_results(path), plan)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not warnings:
        print(f"the sites' data summary ({path}) raises nothing against this job")


def _export(args: argparse.Namespace) -> int:
    job_dir = _build(args, Path(args.out))
    print(f"exported {job_dir} (no custom code); submit it from the FLARE console with: submit_job {job_dir}")
    return 0


def _admin_username(kit: Path) -> str:
    config = kit / "startup" / "fed_admin.json"
    if not config.is_file():
        raise SystemExit(f"{config}: not found; --admin-kit must be an admin's startup kit folder")
    username = json.loads(config.read_text())["admin"]["username"]
    if not isinstance(username, str):
        raise SystemExit(f"{config}: admin.username is {username!r}, not a name; is this an admin's startup kit?")
    return username


def _submit(args: argparse.Namespace) -> int:
    """`fl-job submit`: the job is built in a temporary folder and followed to its end; an unreachable server or a
    timeout becomes one line saying where the server's address is configured, not a traceback."""
    from nvflare.fuel.flare_api.flare_api import new_secure_session

    from federation_tools.admin import submit_and_wait
    from federation_tools.status.progress import RoundBar

    kit = Path(args.admin_kit).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        job_dir = _build(args, Path(tmp))
        try:
            session = new_secure_session(_admin_username(kit), str(kit), timeout=args.connect_timeout)
            try:
                outcome = submit_and_wait(session, job_dir, timeout=args.timeout,
                                          rounds=RoundBar(sys.stdout) if sys.stdout.isatty() else None)
            finally:
                session.close()
        except (ConnectionError, TimeoutError) as exc:  # the server unreachable (and not back), or the job too slow
            print(f"fl-job submit: {exc} (the server's address is in {kit / 'startup' / 'fed_admin.json'})",
                  file=sys.stderr)
            return 1
    _print_transfers(outcome)
    if not outcome.completed:
        print(f"job {outcome.job_id} ended {outcome.status}: {outcome.refusal()}", file=sys.stderr)
        return 1
    print(f"results of job {outcome.job_id}: {outcome.result_dir}")
    return 0


def _print_transfers(outcome: JobOutcome) -> None:
    """Per site, what its link carried over the job and how long that took (server_app.transfers), and any site
    whose downloads keep failing; per round and task in the download's transfers.json."""
    from server_app.transfers import describe, read_transfers

    if outcome.result_dir is not None:
        for line in describe(read_transfers(outcome.server_app_dir())):
            print(f"link {line}")


def _simulate(args: argparse.Namespace) -> int:
    from federation_tools.simulate import simulate

    datasets = dict(item.split("=", 1) for item in args.data)
    server_models = dict(item.split("=", 1) for item in args.server_model)
    workspace = Path(args.workspace)
    job_dir = _build(args, workspace / "job")
    run = simulate(job_dir, workspace / "simulation", args.sites.split(","), datasets, server_models)
    if run.aborted():
        print(f"the simulation did not finish; see {run.server_log}", file=sys.stderr)
        return 1
    print(f"results: {run.server_app_dir}")
    return 0


def _add_command_options(name: str, parser: argparse.ArgumentParser) -> None:
    if name in ("export", "submit"):
        parser.add_argument("--data-summary", metavar="RESULTS_JSON",
                            help="a data-summary job's results.json: warn of what in the sites' data does not fit "
                                 "this job (label map, crop, modalities, classes) before building it")
    if name == "export":
        parser.add_argument("--out", required=True, help="folder to write the job folder into")
    elif name == "submit":
        parser.add_argument("--admin-kit", required=True, help="the admin's startup kit folder")
        parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the job")
        parser.add_argument("--connect-timeout", type=float, default=30.0)
    else:
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--sites", default="site-1,site-2,site-3")
        parser.add_argument("--data", action="append", default=[], metavar="KEY=FOLDER",
                            help="dataset folder per dataset key; {site_name} is replaced per simulated site")
        parser.add_argument("--server-model", action="append", default=[], metavar="KEY=FOLDER",
                            help="model folder the server needs (e.g. dcae=/models/dc-ae for fedkt-csd)")


def _status(args: argparse.Namespace) -> int:
    from federation_tools.status.cli import run

    return run(args, _admin_username(Path(args.admin_kit)))


def _docs(args: argparse.Namespace) -> int:
    from jobs.docs import parameter_tables

    Path(args.out).write_text(parameter_tables())
    print(f"wrote {args.out}")
    return 0


def _list(_: argparse.Namespace) -> int:
    for kind in kinds().values():
        print(f"{kind.name:<20} {kind.summary}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`fl-job`: list, docs and status, and export / submit / simulate with one sub-command per job kind, whose
    options come from the kind's parameters."""
    parser = argparse.ArgumentParser(prog="fl-job", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the job kinds").set_defaults(func=_list)
    docs = commands.add_parser("docs", help="write the parameter tables of every job kind (docs/job-parameters.md)")
    docs.add_argument("--out", default="docs/job-parameters.md")
    docs.set_defaults(func=_docs)
    status = commands.add_parser("status", help="the federation's sites and jobs; --serve serves the study lead's page")
    from federation_tools.status.cli import add_options

    add_options(status)
    status.set_defaults(func=_status)
    for name, func, help_text in (("export", _export, "write a job folder for the FLARE console"),
                                  ("submit", _submit, "submit through the FLARE API and wait"),
                                  ("simulate", _simulate, "run in FLARE's simulator")):
        subcommands = commands.add_parser(name, help=help_text).add_subparsers(dest="kind", required=True,
                                                                               metavar="KIND")
        for kind in kinds().values():
            command = subcommands.add_parser(kind.name, help=kind.summary, description=kind.summary)
            _add_command_options(name, command)
            add_parameter_options(command, kind.params)
            command.set_defaults(func=func, parser=command)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
