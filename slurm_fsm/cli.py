"""The ``slurm-fsm`` command (also ``python -m slurm_fsm``).

Exit codes: 0 PASSED or RELEASED; 1 FAILED, TIMEOUT, HANG_DETECTED,
OUT_OF_MEMORY, CANCELLED; 2 bad input (spec or file); 3 ERROR or BUILD_FAILED;
``128 + N`` when stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
With ``--json`` stdout carries the JSON document and nothing else, also when
the run is stopped by a signal (a CANCELLED report); progress goes to stderr.
Progress is best effort: a closed or broken stderr only silences it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from slurm_fsm.backend import SlurmBackend
from slurm_fsm.errors import SlurmFsmError, SpecError, StateFileError
from slurm_fsm.spec import JobSpec

if TYPE_CHECKING:
    from slurm_fsm.executor import Executor

__all__ = ["EXIT_BAD_INPUT", "EXIT_ERROR", "main"]

EXIT_BAD_INPUT = 2
EXIT_ERROR = 3


EXIT_CODES_HELP = """exit codes:
  0  PASSED, RELEASED (status, plan, diagram: done)
  1  FAILED, TIMEOUT, HANG_DETECTED, OUT_OF_MEMORY, CANCELLED
  2  bad input: the spec or a file it names (nothing was sent to Slurm)
  3  ERROR, BUILD_FAILED (Slurm or the setup failed; the report says why)
  128+N  stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)"""


def _version() -> str:
    from slurm_fsm import __version__

    return __version__


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="slurm-fsm",
        description="Run test and benchmark jobs on Slurm through a persistent allocation.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def spec_command(name: str, help_text: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help_text, description=help_text,
                           epilog=EXIT_CODES_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        c.add_argument("spec", type=Path, help="path of job_spec.json")
        c.add_argument("--json", action="store_true", help="print JSON only on stdout")
        c.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
        c.add_argument("--backend", choices=("slurm", "fake"), default="slurm",
                       help="slurm: this machine's Slurm (default); fake: an in-memory "
                            "cluster for trying it out")
        c.add_argument("--strict", action="store_true",
                       help="an unknown spec key close to a known one (sucess_patterns) is "
                            "an error (exit 2), not a warning")
        return c

    spec_command("run", "run the job of SPEC and print its report")
    spec_command("release", "release the persistent allocation of SPEC's repo_root")
    spec_command("status", "show the persistent allocation: job, state, time left")
    spec_command("plan", "show what step 0 would do now and which Slurm commands it "
                         "would issue, changing nothing")
    d = sub.add_parser("diagram", help="print the state diagram")
    d.add_argument("--format", choices=("mermaid", "dot"), default="mermaid",
                   help="mermaid (default; renders in GitHub and notebooks) or Graphviz dot")
    demo = sub.add_parser("demo", help="run an example job twice through one persistent "
                                       "allocation on the local Slurm cluster")
    demo.add_argument("--fake", action="store_true", help="use the fake cluster")
    demo.add_argument("--keep", action="store_true", help="do not release the allocation")
    demo.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    return p


def _backend(kind: str) -> SlurmBackend:
    if kind == "fake":
        from slurm_fsm.testing import FakeCluster

        return FakeCluster()

    from slurm_fsm.subprocess_backend import SubprocessBackend

    if not os.environ.get("SLURM_CONF") and not Path("/etc/slurm/slurm.conf").exists():
        _say("slurm-fsm: no SLURM_CONF set and no /etc/slurm/slurm.conf: Slurm's tools may "
         "not find a cluster")
    return SubprocessBackend()


def _fake_for(spec: JobSpec) -> SlurmBackend:
    """A FakeCluster that accepts the spec's partition and account."""
    from slurm_fsm.testing import FakeCluster

    p = spec.slurm_params
    nodes = [f"node{i:02d}" for i in range(1, max(4, p.nodes) + 1)]
    return FakeCluster(partitions={p.partition: nodes}, accounts=[p.account])


def _say(text: str) -> None:
    """A line on stderr for the person watching; never fails (a closed pipe, ``2>&1 |
    head -1``, only silences it)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        _silence_stderr()


def _silence_stderr() -> None:
    """stderr is dead: point fd 2 at /dev/null, so that what Python still holds for it
    (and its flush at exit, which would turn the exit code into 120) goes nowhere."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
    except OSError:
        pass


def _settle_stderr() -> None:
    try:
        sys.stderr.flush()
    except OSError:
        _silence_stderr()
        with contextlib.suppress(OSError):
            sys.stderr.flush()


class _Run:
    """The executor of a ``run``/``release``, once made: its partial report is printed
    when a signal stops the run."""

    executor: Executor | None = None


def _emit(data: object, text: str, as_json: bool, out: TextIO) -> None:
    if as_json:
        out.write(json.dumps(data, indent=2, default=str) + "\n")
    else:
        out.write(text if text.endswith("\n") else text + "\n")
    out.flush()


class _Stopped(BaseException):
    """SIGTERM or SIGHUP (CI, ``timeout``, a closed terminal): unwind like Ctrl-C, so
    that a running step is cancelled and the local script stopped on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, _frame: object) -> None:
    raise _Stopped(signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `slurm-fsm`: the help, not a usage error
        parser.print_help()
        return 0
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for stop in (signal.SIGTERM, signal.SIGHUP):
            previous[stop] = signal.signal(stop, _raise_stopped)
    try:
        return _main(args)
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)
        _settle_stderr()


def _main(args: argparse.Namespace) -> int:
    current = _Run()
    try:
        return _dispatch(args, current)
    except SpecError as exc:
        _say(f"slurm-fsm: {exc}")
        return EXIT_BAD_INPUT
    except StateFileError as exc:
        _say(f"slurm-fsm: {exc}")
        return EXIT_BAD_INPUT
    except (SlurmFsmError, OSError) as exc:
        _say(f"slurm-fsm: error: {exc}")
        if getattr(args, "json", False) and args.command in ("run", "release"):
            # an orchestrator reading stdout still gets a report
            from slurm_fsm.report import Report
            from slurm_fsm.results import Status

            report = Report(status=Status.ERROR, task_type="unknown", mode=args.command,
                            summary=f"error: {exc}", errors=[str(exc)])
            _emit(report.to_dict(), "", True, sys.stdout)
        return EXIT_ERROR
    except (KeyboardInterrupt, _Stopped) as exc:
        signum = exc.signum if isinstance(exc, _Stopped) else signal.SIGINT
        name = signal.Signals(signum).name
        _say(f"slurm-fsm: stopped by {name} (the persistent allocation, if any, is kept)")
        if getattr(args, "json", False) and args.command in ("run", "release"):
            _emit_stopped(current, args.command, f"stopped by {name}")
        return 128 + signum


def _emit_stopped(current: _Run, command: str, why: str) -> None:
    """With ``--json``: the one report document, also for a run stopped by a signal."""
    from slurm_fsm.report import Report
    from slurm_fsm.results import Status

    if current.executor is not None:
        report = current.executor.interrupted_report(why)
    else:
        report = Report(status=Status.CANCELLED, task_type="unknown", mode=command,
                        summary=f"CANCELLED: {why}", errors=[why])
    with contextlib.suppress(OSError):
        _emit(report.to_dict(), "", True, sys.stdout)


def _dispatch(args: argparse.Namespace, current: _Run) -> int:
    if args.command == "diagram":
        from slurm_fsm.machine import EDGES, dot_diagram, mermaid_diagram

        text = mermaid_diagram(EDGES) if args.format == "mermaid" else dot_diagram(EDGES)
        sys.stdout.write(text)
        return 0
    if args.command == "demo":
        from slurm_fsm.demo import run_demo

        return run_demo(fake=args.fake, keep=args.keep, quiet=args.quiet)

    spec = JobSpec.from_file(args.spec, strict=args.strict)
    if spec.load_warnings:
        lines = "".join(f"\n  {w}" for w in spec.load_warnings)
        print(f"slurm-fsm: warning: job spec {args.spec}:{lines}", file=sys.stderr)
    backend = _fake_for(spec) if args.backend == "fake" else _backend("slurm")
    if args.command == "status":
        return _status(spec, backend, args.json)
    if args.command == "plan":
        from slurm_fsm.plan import make_plan

        plan = make_plan(spec, backend)
        _emit(plan.to_dict(), plan.render_text(), args.json, sys.stdout)
        return 0 if plan.final_state != "Failed" else EXIT_ERROR

    from slurm_fsm.executor import Executor
    from slurm_fsm.progress import StderrEvents

    if args.command == "release":
        import attrs

        spec = attrs.evolve(spec, release_allocation=True)
    events = StderrEvents(quiet=args.quiet, stream_output=not args.json)
    clock = getattr(backend, "clock", None)  # the fake cluster's own clock
    current.executor = Executor(spec, backend, events=events, clock=clock)
    report = current.executor.run()
    events.close()
    _emit(report.to_dict(), report.render_text(), args.json, sys.stdout)
    return report.exit_code_for_cli


def _status(spec: JobSpec, backend: SlurmBackend, as_json: bool) -> int:
    from slurm_fsm.allocation import Allocation

    status = Allocation.for_spec(spec, backend).status()
    _emit(status.to_dict(), status.render_text(), as_json, sys.stdout)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
