"""The commands about runs by id: ``runs``, ``logs``, ``attach``, ``wait``, ``report``,
``cancel``, and ``run --detach`` (:mod:`slurm_fsm.detach`). None of them needs the spec:
a run id and the checkout (``--repo``, the current directory by default) are enough,
on any login node that shares it."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the parser is built for every command: nothing heavy at import
    from slurm_fsm.detach import DetachedRun, RunView

__all__ = ["add_parsers", "dispatch", "print_detached"]

#: How many finished runs ``runs`` shows without ``--all``.
RECENT = 20


def add_parsers(sub: Any, epilog: str) -> None:
    """The subcommands, on the CLI's subparsers ``sub``."""

    def command(name: str, help_text: str, *, run_ids: str = "") -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = sub.add_parser(
            name, help=help_text, description=help_text, epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        if run_ids == "one":
            c.add_argument("run_id", metavar="RUN_ID", help="a run id (`slurm-fsm runs`)")
        elif run_ids == "many":
            c.add_argument("run_id", metavar="RUN_ID", nargs="+", help="run ids")
        c.add_argument("--repo", default=".", metavar="DIR",
                       help="the checkout (its work_dirs holds the runs; default: here)")
        return c

    c = command("runs", "list this checkout's runs, newest first")
    c.add_argument("--all", action="store_true",
                   help=f"every run kept (default: running ones and the last {RECENT})")
    c.add_argument("--json", action="store_true", help="one JSON document")
    c = command("logs", "print a run's log now (in any state); -f follows it to the end",
                run_ids="one")
    c.add_argument("-f", "--follow", action="store_true", help="follow to the run's end")
    c = command("attach", "follow a run as a foreground run shows it, then print its "
                          "report; Ctrl-C detaches and never cancels", run_ids="one")
    c.add_argument("--json", action="store_true", help="the report as JSON at the end")
    c.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    c = command("wait", "wait for runs to end; exit code the worst of theirs",
                run_ids="many")
    c.add_argument("--timeout", type=float, metavar="S", help="give up after S seconds "
                   "(exit 3; the runs go on)")
    c.add_argument("--json", action="store_true", help="a JSON list, one report per run")
    c = command("report", "print a run's report (rebuilt when its owner is gone without "
                          "one)", run_ids="one")
    c.add_argument("--json", action="store_true", help="the report as JSON")
    command("cancel", "stop a run's job (its steps; the allocation stays)", run_ids="one")


COMMANDS = ("runs", "logs", "attach", "wait", "report", "cancel")


def _out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def _report_doc(view: RunView, report_dict: dict[str, Any], source: str) -> dict[str, Any]:
    return {"run_id": view.run_id, "report_source": source, **report_dict}


def dispatch(args: argparse.Namespace) -> int:
    """Run one of :data:`COMMANDS`; the exit code."""
    repo = Path(args.repo).resolve()
    if args.command == "logs" and not args.follow:
        from slurm_fsm.runlog import where

        found = where(repo, args.run_id)  # the run's files, read as plain JSON
        if found is not None:
            return _print_log(args.run_id, *found)
    from slurm_fsm.detach import attach

    if args.command == "runs":
        return _runs(repo, args.all, args.json)
    if args.command == "wait":
        return _wait([attach(r, repo) for r in args.run_id], args.timeout, args.json)
    handle = attach(args.run_id, repo)
    if args.command == "logs":
        return _logs(handle, args.follow)
    if args.command == "attach":
        return _attach(handle, args.json, args.quiet)
    if args.command == "report":
        return _report(handle, args.json)
    _out(handle.cancel() + "\n")
    return 0


def _runs(repo: Path, show_all: bool, as_json: bool) -> int:
    from slurm_fsm.detach import RunState, runs

    views = runs(repo)
    if not show_all:
        live = [v for v in views if v.state in (RunState.STARTING, RunState.RUNNING)]
        ended = [v for v in views if v not in live][:RECENT]
        views = [v for v in views if v in live or v in ended]
    if as_json:
        _out(json.dumps([v.to_dict() for v in views], indent=1) + "\n")
        return 0
    rows = [("RUN ID", "STATE", "STATUS", "MODE", "OWNER", "STARTED", "JOB", "SPEC")]
    for v in views:
        d = v.to_dict()
        rows.append((v.run_id, str(d["state"]), str(d["status"] or "-"), str(d["mode"]),
                     f"{d['owner']}@{d['host']}" if d["owner"] else "-", str(d["started"]),
                     str(d["allocation_id"] or d["job_id"] or "-"), str(d["spec"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        _out("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1]
             + "\n")
    if len(rows) == 1:
        _out(f"(no run in {repo / 'work_dirs'})\n")
    return 0


def _print_log(run_id: str, log: Path | None, state: str) -> int:
    """Print the log ``log`` of run ``run_id`` as it is now (None: say there is none)."""
    if log is None:
        _err(f"run {run_id}: no log yet ({state}; the job has not started)\n")
        return 0
    try:
        with open(log, "rb") as fh:
            while chunk := fh.read(1 << 20):
                sys.stdout.buffer.write(chunk)
    except OSError as exc:
        _err(f"run {run_id}: cannot read its log {log}: {exc}\n")
        return 3
    sys.stdout.flush()
    return 0


def _ended(handle: DetachedRun) -> Callable[[], bool]:
    from slurm_fsm.detach import RunState

    return lambda: handle.view().state in (RunState.DONE, RunState.LOST)


def _logs(handle: DetachedRun, follow_it: bool) -> int:
    from slurm_fsm.detach import RunState, follow

    view = handle.view()
    if not follow_it:
        return _print_log(handle.run_id, view.log, view.state)
    while (log := handle.view().log) is None or (
            view.record is not None and str(log) == view.record.progress
            and handle.view().state == RunState.STARTING):
        if _ended(handle)():
            return 0
        time.sleep(0.2)
    for chunk in follow(log, until=_ended(handle)):
        sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
    return 0


def _print_report(view: RunView, as_json: bool) -> int:
    from slurm_fsm.detach import backend_for, settle

    saved = settle(view, backend_for(view.files))
    if saved is None:
        _err(f"run {view.run_id} is still {view.state}: no report yet (`slurm-fsm wait "
             f"{view.run_id}`)\n")
        return 3
    report = saved.report
    if as_json:
        _out(json.dumps(_report_doc(view, report.to_dict(), saved.source), indent=2) + "\n")
    else:
        source = "" if saved.source == "live" else f" ({saved.source})"
        _out(f"run {view.run_id}{source}\n{report.render_text()}\n")
    return report.exit_code_for_cli


def _report(handle: DetachedRun, as_json: bool) -> int:
    return _print_report(handle.view(), as_json)


def _attach(handle: DetachedRun, as_json: bool, quiet: bool) -> int:
    from slurm_fsm.detach import follow

    view = handle.view()
    rec = view.record
    source = Path(rec.progress) if rec is not None and rec.progress else view.log
    try:
        if source is not None and not quiet:
            for chunk in follow(source, until=_ended(handle)):
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
        report = handle.result()
    except KeyboardInterrupt:
        _err(f"\ndetached from run {handle.run_id}; it goes on (`slurm-fsm attach "
             f"{handle.run_id}`)\n")
        return 130
    del report
    return _print_report(handle.view(), as_json)


def _wait(handles: Sequence[DetachedRun], timeout: float | None, as_json: bool) -> int:
    from slurm_fsm.detach import backend_for, settle

    deadline = None if timeout is None else time.monotonic() + timeout
    docs: list[dict[str, Any]] = []
    worst = 0
    for handle in handles:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            handle.result(left)
        except TimeoutError:
            _err(f"run {handle.run_id}: no verdict after {timeout} s; it goes on\n")
            docs.append({"run_id": handle.run_id, "state": handle.state(),
                         "cli_exit_code": 3})
            worst = max(worst, 3)
            continue
        view = handle.view()
        saved = settle(view, backend_for(view.files))
        assert saved is not None
        code = saved.report.exit_code_for_cli
        worst = max(worst, code)
        docs.append(_report_doc(view, saved.report.to_dict(), saved.source))
        if not as_json:
            _out(f"{handle.run_id}: {saved.report.summary}\n")
    if as_json:
        _out(json.dumps(docs, indent=1) + "\n")
    return worst


def print_detached(handle: DetachedRun, as_json: bool) -> int:
    """What ``run --detach`` prints once the run is on its way (its report, when it
    ended before: a failed step 0)."""
    view = handle.view()
    if view.saved is not None:
        return _print_report(view, as_json)
    d = view.to_dict()
    rid = handle.run_id
    if as_json:
        _out(json.dumps({**d, "attach": f"slurm-fsm attach {rid}"}, indent=1) + "\n")
        return 0
    where = f"allocation {d['allocation_id']}" if d["allocation_id"] else f"job {d['job_id']}"
    _out(f"run {rid} started, detached ({where}; log {d['log']}); it is owned by its "
         f"supervisor, pid {d['pid']} on {d['host']}\n"
         f"  follow:   slurm-fsm attach {rid}    (Ctrl-C detaches, never cancels)\n"
         f"  log:      slurm-fsm logs {rid} -f\n"
         f"  verdict:  slurm-fsm wait {rid}    or    slurm-fsm report {rid}\n"
         f"  stop it:  slurm-fsm cancel {rid}\n")
    return 0
