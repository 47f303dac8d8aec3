"""``jupyter edt``: submit, list, follow, cancel and delete jobs from a terminal.

``jupyter edt COMMAND`` runs the ``jupyter-edt`` executable (Jupyter's launcher dispatches
``jupyter X`` to ``jupyter-X`` on PATH), whose entry point is :func:`main`. The server is found
as in a notebook (``EDT_URL``/``EDT_TOKEN``, or the one running Jupyter server); ``--url`` and
``--token`` override. Errors are one line on stderr and exit status 1; bad usage exits with 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from .notebook.client import EDTClient, failure_report
from .notebook.discovery import HOW_TO_CONFIGURE
from .notebook.errors import EDTError
from .notebook.submit_options import add_submit_options, job_options
from .notebook.table import JobTable

PROG = "jupyter edt"
CLI_HOW_TO_CONFIGURE = (
    f"Pass the server explicitly ({PROG} --url http://host:8888/ --token TOKEN ...) or set "
    "the EDT_URL and EDT_TOKEN environment variables."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Elastic distributed training jobs on a Jupyter server."
    )
    parser.add_argument("--url", help="The Jupyter server's base URL (default: found, or $EDT_URL)")
    parser.add_argument("--token", help="A Jupyter API token (default: found, or $EDT_TOKEN)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    submit = commands.add_parser(
        "submit",
        help="Submit a Python script or a directory as a job",
        description="Submit a Python script, a directory (its --entrypoint, main.py by "
        "default, is run), or '-' to read the program from stdin. Arguments after '--' are "
        "passed to the program.",
    )
    submit.add_argument("program", help="A .py file, a directory, or '-' for stdin")
    submit.add_argument("--entrypoint", help="The file to run (default: the script, or main.py)")
    add_submit_options(submit, name_default="the script's name")

    commands.add_parser(
        "serve",
        add_help=False,
        help="Run the job service shared by a machine's users (--help-all: its settings)",
    )

    listing = commands.add_parser("list", help="List jobs, newest first")
    listing.add_argument("--state", action="append", help="Keep this state (repeatable)")
    listing.add_argument("--user", help="Another user's jobs (administrators)")
    listing.add_argument("--json", action="store_true", help="Print the jobs as JSON")

    logs = commands.add_parser("logs", help="Print or follow a job's logs")
    logs.add_argument("job_id", metavar="ID")
    logs.add_argument("--name", help="One log (default: all; see --list)")
    logs.add_argument("--tail", type=int, default=100, help="Lines per log (default 100)")
    logs.add_argument("-f", "--follow", action="store_true", help="Follow until the job ends")
    logs.add_argument("--list", action="store_true", help="Print the log names")

    cancel = commands.add_parser("cancel", help="Cancel jobs (they stay, with their logs)")
    cancel.add_argument("job_ids", nargs="+", metavar="ID")

    delete = commands.add_parser(
        "delete", help="Delete jobs, stopping those still running (usage stays counted)"
    )
    delete.add_argument("job_ids", nargs="+", metavar="ID")

    download = commands.add_parser("download", help="Download a job's result directory")
    download.add_argument("job_id", metavar="ID")
    download.add_argument(
        "-o", "--out", help="Destination folder (default: ./<job name>-result)", default=None
    )
    download.add_argument("--path", help="Only this artifact (e.g. model/model_epoch_final.pth)")
    download.add_argument("--list", action="store_true", help="Only list the artifacts")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # the service is an Application with its own options
        from .serve.app import EDTService

        EDTService.launch_instance(argv[1:])
        return 0
    program_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, program_args = argv[:cut], argv[cut + 1 :]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        client = EDTClient(args.url, args.token) if args.url else EDTClient(token=args.token)
        return COMMANDS[args.command](client, args, program_args)
    except EDTError as err:
        message = str(err).replace(HOW_TO_CONFIGURE, CLI_HOW_TO_CONFIGURE)
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _submit(client: EDTClient, args: argparse.Namespace, program_args: list[str]) -> int:
    options: dict[str, Any] = {
        **job_options(args),
        "args": program_args,
        "entrypoint": args.entrypoint,
        "files": [p for group in args.files or [] for p in group],
    }
    if args.program == "-":
        job = client.submit(code=sys.stdin.read(), name=args.name or "stdin", **options)
    elif os.path.isdir(args.program):
        job = client.submit(directory=args.program, name=args.name, **options)
    else:
        job = client.submit(script=args.program, name=args.name, **options)
    print(f"Submitted job {job.id} ({job.name}): {job.state}")
    if not args.wait:
        return 0
    job.wait(progress=True, stream=sys.stderr)
    if job.state != "SUCCEEDED":
        print(failure_report(job) if job.state == "FAILED" else job.reason, file=sys.stderr)
        return 1
    return 0


def _list(client: EDTClient, args: argparse.Namespace, _: list[str]) -> int:
    states = [s.upper() for s in args.state or []]
    jobs = client.list(state=states, user=args.user)
    if args.json:
        print(json.dumps([job.data for job in jobs], indent=2))
    else:
        print(repr(JobTable(jobs)))
    return 0


def _logs(client: EDTClient, args: argparse.Namespace, _: list[str]) -> int:
    job = client.get(args.job_id)
    if args.list:
        for name in job.log_names():
            print(name)
        return 0
    if not args.follow:
        text = job.logs(args.name, tail=args.tail)
        print(text, end="" if text.endswith("\n") else "\n")
        return 0
    at_line_start: dict[str, bool] = {}
    for name, text in job.follow_logs(args.name):
        if args.name is not None:
            sys.stdout.write(text)
        else:  # several logs interleave: prefix each line with its log's name
            for piece in text.splitlines(keepends=True):
                prefix = f"[{name}] " if at_line_start.get(name, True) else ""
                sys.stdout.write(prefix + piece)
                at_line_start[name] = piece.endswith("\n")
        sys.stdout.flush()
    return 0


def _cancel(client: EDTClient, args: argparse.Namespace, _: list[str]) -> int:
    for job_id in args.job_ids:
        job = client.cancel(job_id)
        print(f"Cancelled job {job.id} ({job.name}).")
    return 0


def _delete(client: EDTClient, args: argparse.Namespace, _: list[str]) -> int:
    for job_id in args.job_ids:
        job = client.delete(job_id)
        print(f"Deleted job {job.id} ({job.name}).")
    return 0


def _download(client: EDTClient, args: argparse.Namespace, _: list[str]) -> int:
    job = client.get(args.job_id)
    if args.list:
        for item in job.artifacts():
            print(f"{item['size']:>12}  {item['path']}")
        return 0
    out = job.download(args.out, path=args.path)
    print(
        f"Downloaded {'the results' if args.path is None else args.path} of job {job.id} into {out}"
    )
    return 0


COMMANDS = {
    "submit": _submit,
    "list": _list,
    "logs": _logs,
    "cancel": _cancel,
    "delete": _delete,
    "download": _download,
}


if __name__ == "__main__":
    sys.exit(main())
