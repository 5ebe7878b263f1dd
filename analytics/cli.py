"""The `jobsight` command. Each subcommand lives in its own module exposing
``configure(parser)`` and ``run(args) -> int``; this file only wires them together.

Start-up is part of every command's time, so `jobsight COMMAND` imports only COMMAND's module:
the other subcommands are listed by their help line alone (the full parser, every module
configured, is `build_parser()`, which the docs test walks). The subcommand modules import what
is heavy (duckdb, the reports, the dashboard) inside ``run``, so `--help` stays light too.

`jobsight sidecar ...` is handed to the collector untouched, before anything heavy is imported,
so the in-job sidecar starts fast and behaves exactly like `python3 collector/sidecar.py`.
`jobsight sidecar prolog|epilog` (as root, in an environment a job may have written) restarts as
`python -I -m jobsight.collector` with a clean environment before this module imports anything more.
"""
from __future__ import annotations

import sys

if sys.argv[1:2] == ["sidecar"]:
    from jobsight.collector.isolate import restart_isolated
    restart_isolated(sys.argv[2:], ["-m", "jobsight.collector"])

import argparse  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402

from jobsight.analytics.errors import UserError  # noqa: E402

# polars' allocator (its own jemalloc) gives freed memory back to the system after 0.5 s, polars'
# setting; an ingest that frees and takes again ~100 MB a block then pays a page fault per 4 kB
# each time (~4 s of a 1M-record PBS ingest's ~30 s of CPU). jemalloc's own default, 10 s, keeps
# it for reuse while the command runs. Read once, when polars is first loaded (none of the imports
# above loads it); a value given in the environment stands.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:10000,muzzy_decay_ms:10000")

# subcommand -> (its module, one-line help). A module is imported only when its parser is built.
COMMANDS = "jobsight.analytics.commands."
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "ingest": (COMMANDS + "ingest", "load sacct/seff/sidecar/nvidia-smi files or a live sacct into DuckDB"),
    "job": (COMMANDS + "job", "one job's efficiencies, GPU table, SBU, flags and advice (seff-style)"),
    "flags": (COMMANDS + "flags", "flagged jobs: idle GPUs, oversized memory/cores/time, failed burn"),
    "usage": (COMMANDS + "usage", "SBU burned and wasted by user, account, partition or period"),
    "report": (COMMANDS + "report", "weekly reports per user, project and cluster: HTML, Markdown, CSV, e-mail"),
    "dashboard": (COMMANDS + "dashboard", "web dashboard: burn, waste and flagged jobs per user and project, job time series"),
    "settings": (COMMANDS + "settings", "the settings a database holds: show them, or apply a jobsight.toml"),
    "lake": (COMMANDS + "lake", "export samples and jobs to a Parquet lake (cluster/month) and query it in place"),
    "prune": (COMMANDS + "prune", "move samples older than a date to the Parquet lake, then shrink the database file"),
    "watch": (COMMANDS + "watch", "every 15 minutes: ingest sacct and the site spool, e-mail owners of jobs with idle GPUs"),
    "demo": (COMMANDS + "demo", "generate a realistic cluster's data, ingest it, write reports and serve the dashboard"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or with ``only``: that subcommand's options, the others
    named with their help line (enough for `jobsight --help` and for a mistyped command)."""
    parser = argparse.ArgumentParser(prog="jobsight", description="Job accounting and GPU/CPU efficiency for HPC clusters.")
    parser.add_argument("--version", action=_Version, help="print the version (from the installed package) and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("sidecar", help="sample this job's GPUs, CPU and memory to CSV (see `jobsight sidecar --help`)", add_help=False)
    for name, (module, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or name == only:
            importlib.import_module(module).configure(sp)
            sp.set_defaults(_module=module)
    return parser


class _Version(argparse.Action):
    """--version, the version read only when asked for (importlib.metadata is 50-150 ms of every
    command's start-up otherwise)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"jobsight {version()}")
        parser.exit()


def version() -> str:
    """The installed package's version (its metadata: pyproject.toml's, written once)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version
    try:
        return package_version("jobsight")
    except PackageNotFoundError:        # run from a checkout that was never installed
        return "unknown (not installed)"


def _innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command the arguments chose: its usage is the one to show."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                return _innermost(action.choices[chosen], args)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "sidecar":
        from jobsight.collector.sidecar import main as sidecar_main
        return sidecar_main(argv[1:])
    # the command is the first argument (jobsight's only options before it are --help and --version)
    parser = build_parser(only=argv[0] if argv and argv[0] in SUBCOMMANDS else "")
    args, extra = parser.parse_known_args(argv)
    if extra:
        # argparse reports an unknown option with the top-level usage; show the command's own
        where = _innermost(parser, args) if argv[0] in SUBCOMMANDS else parser
        where.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    try:
        return importlib.import_module(args._module).run(args)
    except UserError as exc:
        print(f"jobsight {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`jobsight flags | head`): normal in pipelines, not a crash
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
