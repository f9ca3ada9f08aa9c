"""The ``slurm-fsm`` command (also ``python -m slurm_fsm``).

Exit codes: 0 PASSED or RELEASED; 1 FAILED, TIMEOUT, HANG_DETECTED,
OUT_OF_MEMORY, CANCELLED; 2 bad input (spec or file); 3 ERROR or BUILD_FAILED.
With ``--json`` stdout carries the JSON document and nothing else; progress
goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from slurm_fsm.backend import SlurmBackend
from slurm_fsm.errors import SlurmFsmError, SpecError, StateFileError
from slurm_fsm.spec import JobSpec

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
    import os

    from slurm_fsm.subprocess_backend import SubprocessBackend

    if not os.environ.get("SLURM_CONF") and not Path("/etc/slurm/slurm.conf").exists():
        print("slurm-fsm: no SLURM_CONF set and no /etc/slurm/slurm.conf: Slurm's tools may "
              "not find a cluster", file=sys.stderr)
    return SubprocessBackend()


def _fake_for(spec: JobSpec) -> SlurmBackend:
    """A FakeCluster that accepts the spec's partition and account."""
    from slurm_fsm.testing import FakeCluster

    p = spec.slurm_params
    nodes = [f"node{i:02d}" for i in range(1, max(4, p.nodes) + 1)]
    return FakeCluster(partitions={p.partition: nodes}, accounts=[p.account])


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


def _main(args: argparse.Namespace) -> int:
    try:
        return _dispatch(args)
    except SpecError as exc:
        print(f"slurm-fsm: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except StateFileError as exc:
        print(f"slurm-fsm: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (SlurmFsmError, OSError) as exc:
        print(f"slurm-fsm: error: {exc}", file=sys.stderr)
        if getattr(args, "json", False) and args.command in ("run", "release"):
            # an orchestrator reading stdout still gets a report
            from slurm_fsm.report import Report
            from slurm_fsm.results import Status

            report = Report(status=Status.ERROR, task_type="unknown", mode=args.command,
                            summary=f"error: {exc}", errors=[str(exc)])
            _emit(report.to_dict(), "", True, sys.stdout)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("slurm-fsm: interrupted (the persistent allocation, if any, is kept)",
              file=sys.stderr)
        return 130
    except _Stopped as exc:
        print(f"slurm-fsm: stopped by {signal.Signals(exc.signum).name} (the persistent "
              "allocation, if any, is kept)", file=sys.stderr)
        return 128 + exc.signum


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "diagram":
        from slurm_fsm.machine import EDGES, dot_diagram, mermaid_diagram

        text = mermaid_diagram(EDGES) if args.format == "mermaid" else dot_diagram(EDGES)
        sys.stdout.write(text)
        return 0
    if args.command == "demo":
        from slurm_fsm.demo import run_demo

        return run_demo(fake=args.fake, keep=args.keep, quiet=args.quiet)

    spec = JobSpec.from_file(args.spec)
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
    report = Executor(spec, backend, events=events, clock=clock).run()
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
