"""`site-agent summary export`: the privacy officer's view of exactly what a data-summary job would send.

    site-agent summary export --kit KIT --out FOLDER [--job EXPORTED_JOB_FOLDER] [--set NAME=VALUE ...]

The job's parameters come from the job folder the study lead sent (its site task's arguments), or their defaults,
then each `--set` (the parameter names of `fl-job export data-summary --help`, in their JSON form: label_map=brats2023,
roi_size=[128,128,128], dp_noise_multiplier=1.0). The policy's `min_count` is the site's own.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from site_agent.kit.site_config import SiteConfig

KIND = "data-summary"


def job_values(job_folder: str | None, settings: list[str]) -> dict[str, Any]:
    """The parameters of the exported job's site task (any app's config_fed_client.json), then `--set` overrides."""
    values: dict[str, Any] = {}
    if job_folder:
        configs = sorted(Path(job_folder).glob("*/config/config_fed_client.json"))
        if not configs:
            raise SystemExit(f"{job_folder}: no */config/config_fed_client.json; pass the folder `fl-job export` wrote")
        for executor in json.loads(configs[0].read_text()).get("executors", []):
            args = executor.get("executor", {}).get("args", {})
            if args.get("kind") == KIND:
                values = dict(args["params"])
        if not values:
            raise SystemExit(f"{configs[0]}: not a {KIND} job")
    for setting in settings:
        name, sep, text = setting.partition("=")
        if not sep:
            raise SystemExit(f"--set {setting!r}: write NAME=VALUE")
        try:
            values[name.strip()] = json.loads(text)
        except json.JSONDecodeError:
            values[name.strip()] = text
    return values


def _export(args: argparse.Namespace) -> int:
    """Compute the summary as the job would, under the site's own policy, write it and its description, and audit it."""
    from fl_contract.job_params import DataSummaryParams
    from fl_contract.params import ParameterError, params_from_json
    from site_agent.privacy.audit import SUMMARY_EXPORTED, AuditLog
    from site_agent.privacy.policy import PolicyInForce
    from site_agent.summary.export import SUMMARY_FILE, sha256, summary_text, write_export

    kit = Path(args.kit)
    site = PolicyInForce.read(kit / "local")
    if site.policy is None:
        raise SystemExit(f"no policy in force: {site.problem}")
    try:
        job = params_from_json(DataSummaryParams, job_values(args.job, args.set or []))
    except ParameterError as err:
        raise SystemExit(f"data-summary parameters: {err}") from None
    config = SiteConfig.for_kit(kit)
    folder = config.data_dir(job.dataset, args.site or kit.resolve().name)
    text, problems = summary_text(folder, job, int(site.policy.min_count))
    description = write_export(Path(args.out), text, problems)
    AuditLog(site.records).record(SUMMARY_EXPORTED, folder=str(Path(args.out).resolve()),
                                  summary_sha256=sha256(text), dataset=job.dataset)
    print(description.read_text())
    refused = sum(1 for line in problems.splitlines() if line)
    if refused:
        print(f"{refused} cases a training job would refuse: see {Path(args.out) / 'refused_cases.txt'} (kept here)")
    print(f"wrote {Path(args.out) / SUMMARY_FILE}: review it, then run the job with reviewed_summary=<dataset key of "
          "this folder>, or let the job compute the same bytes")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`site-agent summary`: the privacy officer sees what a data summary would send before any job asks."""
    parser = subparsers.add_parser("summary", help="data summary: export exactly what a data-summary job would send")
    commands = parser.add_subparsers(dest="summary_command", required=True, metavar="COMMAND")
    export = commands.add_parser("export", help="write the summary a data-summary job would send, with a description")
    export.add_argument("--kit", required=True, help="this site's startup kit (its local/site_agent.json is read)")
    export.add_argument("--out", required=True, help="folder for the export (give it a dataset key to send it)")
    export.add_argument("--job", help="the exported data-summary job folder the study lead sent (its parameters)")
    export.add_argument("--set", action="append", metavar="NAME=VALUE",
                        help="a job parameter, e.g. label_map=brats2023 or roi_size=[128,128,128] (repeatable)")
    export.add_argument("--site", help="site name for {site_name} in configured paths (default: the kit folder's name)")
    export.set_defaults(func=_export)
