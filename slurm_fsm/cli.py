"""The ``slurm-fsm`` command (also ``python -m slurm_fsm``).

Exit codes: 0 PASSED or RELEASED; 1 FAILED, TIMEOUT, HANG_DETECTED,
OUT_OF_MEMORY, CANCELLED; 2 bad input (spec, file or command line); 3 ERROR or
BUILD_FAILED; ``128 + N`` when stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129
SIGHUP). With ``--json`` stdout carries exactly one JSON document and nothing else,
whatever happens: the command's document, or an error document (``status`` BAD_INPUT,
ERROR or CANCELLED, ``cli_exit_code``, ``summary``, ``errors``, ``problems``) on bad
input, on an unexpected error and on a signal. Progress goes to stderr, best effort:
a closed or broken stderr only silences it.

The module imports only what a command needs (``--version``, ``diagram`` and
``status`` never load the executor, the monitor or the build; tests/test_cli.py
checks it): the start of a short run is mostly import time.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

if TYPE_CHECKING:
    from pathlib import Path

    from slurm_fsm.backend import SlurmBackend
    from slurm_fsm.executor import Executor
    from slurm_fsm.progress import StderrEvents
    from slurm_fsm.spec import JobSpec

from slurm_fsm.fakecli import FAKE_ACCOUNTS, FAKE_PARTITIONS

__all__ = ["EXIT_BAD_INPUT", "EXIT_ERROR", "FAKE_ACCOUNTS", "FAKE_PARTITIONS",
           "LOG_LEVEL_ENV", "configure_logging", "fake_backend", "fake_state_path", "main"]

EXIT_BAD_INPUT = 2
EXIT_ERROR = 3



EXIT_CODES_HELP = """exit codes:
  0  PASSED, RELEASED (status, plan, diagram: done)
  1  FAILED, TIMEOUT, HANG_DETECTED, OUT_OF_MEMORY, CANCELLED
  2  bad input: the spec, a file it names or the command line (nothing was sent
     to Slurm)
  3  ERROR, BUILD_FAILED (Slurm or the setup failed; the report says why)
  128+N  stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)"""


class _UsageError(Exception):
    """A bad command line (argparse's error), raised so that ``--json`` can report it."""


class _Parser(argparse.ArgumentParser):
    """Every parser and subparser (``add_subparsers`` makes them of this class) ends its
    ``--help`` with :data:`EXIT_CODES_HELP`: a command added later cannot forget it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", EXIT_CODES_HELP)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{self.prog}: error: {message}")


class _VersionAction(argparse.Action):
    """``--version``, reading the package metadata only when asked (importlib.metadata
    costs every other command ~10 ms of start)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from slurm_fsm import __version__

        sys.stdout.write(f"{parser.prog} {__version__}\n")
        parser.exit()


class _Discarded:
    """A subcommand's parser not built (:class:`_OnlyCommand`): its arguments are dropped."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        return None


class _OnlyCommand:
    """The subparsers action, adding the parser of the command ``only`` alone (None:
    every one): a command line that names its command builds that one (each parser
    built costs every start; ``slurm-fsm logs`` answers in a fraction of a second).
    ``seen``: every command name asked for, built or not."""

    def __init__(self, sub: Any, only: str | None) -> None:
        self.sub = sub
        self.only = only
        self.seen: set[str] = set()

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        self.seen.add(name)
        if self.only is None or name == self.only:
            return self.sub.add_parser(name, **kwargs)
        return _Discarded()


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with ``only`` (a command's name), that command's
    subparser alone (every one when ``only`` names no command)."""
    p = _Parser(
        prog="slurm-fsm",
        description="Run test and benchmark jobs on Slurm through a persistent allocation.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action=_VersionAction, help="print the version and exit")
    sub = _OnlyCommand(p.add_subparsers(dest="command", metavar="COMMAND"), only)

    def spec_command(name: str, help_text: str) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = sub.add_parser(
            name, help=help_text, description=help_text, epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        c.add_argument("spec", help="path of job_spec.json")
        c.add_argument("--json", action="store_true",
                       help="print exactly one JSON document on stdout, also on errors")
        c.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
        c.add_argument("--backend", choices=("slurm", "fake"), default="slurm",
                       help="slurm: this machine's Slurm (default); fake: an in-memory "
                            "cluster that runs the script here, for trying it out")
        c.add_argument("--fake-partition", action="append", metavar="NAME",
                       help="a partition the fake cluster has (repeatable; default: "
                            f"{', '.join(FAKE_PARTITIONS)})")
        c.add_argument("--fake-account", action="append", metavar="NAME",
                       help="an account the fake cluster accepts (repeatable; default: "
                            f"{', '.join(FAKE_ACCOUNTS)})")
        c.add_argument("--strict", action="store_true",
                       help="an unknown spec key close to a known one (sucess_patterns) is "
                            "an error (exit 2), not a warning")
        return c

    for name, what in (("run", "replace an allocation"), ("release", "release")):
        c = spec_command(name, "run the job of SPEC and print its report" if name == "run"
                         else "release the persistent allocation of SPEC's repo_root")
        c.add_argument(
            "--no-wait", action="store_true",
            help=f"when other runs' jobs use the allocation, do not {what} under them "
                 "nor wait for them: say so, change nothing (exit 3)")
        if name == "run":
            c.add_argument("--detach", action="store_true",
                           help="step 0 and the job's start as usual, then return: a "
                                "supervisor owns the run; print its run id and how to "
                                "follow it (attach, logs, wait, report, cancel)")
    spec_command("status", "show the persistent allocation: job, state, time left, and "
                           "the jobs running on it (pid, spec, steps, GPUs)")
    spec_command("plan", "show what step 0 would do now and which Slurm commands it "
                         "would issue, changing nothing")
    from slurm_fsm import cli_runs

    cli_runs.add_parsers(sub, EXIT_CODES_HELP)
    _add_diagram(sub)
    _add_demo(sub)
    return p if only is None or only in sub.seen else _parser()


def _add_demo(sub: _OnlyCommand) -> None:
    demo = sub.add_parser("demo", help="run an example job twice through one persistent "
                                       "allocation on the local Slurm cluster")
    demo.add_argument("--fake", action="store_true", help="use the fake cluster")
    demo.add_argument("--keep", action="store_true", help="do not release the allocation")
    demo.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")


def _backend(kind: str) -> SlurmBackend:
    """The real backend, once a Slurm configuration is there to read (checked on disk,
    before any Slurm tool runs: one message saying how to point the shell at a
    cluster)."""
    from slurm_fsm.preflight import NoSlurmConfig, slurm_config_problem

    problem = slurm_config_problem()
    if problem is not None:
        raise NoSlurmConfig(problem)
    return _unchecked_backend()


def _unchecked_backend() -> SlurmBackend:
    """The real backend for a command that will ask Slurm nothing (status, no state
    file): no configuration needed."""
    from slurm_fsm.subprocess_backend import SubprocessBackend

    return SubprocessBackend()


def fake_state_path(spec: JobSpec) -> Path:
    """The state file of ``--backend fake``: ``work_dirs/.slurm_alloc.fake.json``, beside
    the real one and never it, so that a real run, ``status`` or ``release`` never takes
    a fake allocation for a real one."""
    from slurm_fsm.paths import StatePaths

    return StatePaths.for_repo(spec.repo_root, fake=True).state


def _fake_for(args: argparse.Namespace) -> SlurmBackend:
    return fake_backend(args.fake_partition or [], args.fake_account or [])


def fake_backend(partitions: Sequence[str], accounts: Sequence[str]) -> SlurmBackend:
    """The fake cluster of ``--backend fake`` (:func:`slurm_fsm.fakecli.fake_backend`)."""
    from slurm_fsm.fakecli import fake_backend as make

    return make(partitions, accounts)


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
        import json

        out.write(json.dumps(data, indent=2, default=str) + "\n")
    else:
        out.write(text if text.endswith("\n") else text + "\n")
    out.flush()


def _error_document(status: str, code: int, command: str | None, summary: str,
                    problems: Sequence[str] = (), file: str | None = None) -> dict[str, Any]:
    """What ``--json`` prints when there is no report to print: bad input (exit 2), an
    unexpected error (3), a signal (128+N)."""
    doc: dict[str, Any] = {"status": status, "cli_exit_code": code, "command": command,
                           "summary": summary, "errors": list(problems) or [summary],
                           "problems": list(problems)}
    if file is not None:
        doc["file"] = file
    return doc


def _print_json_error(doc: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # stdout is gone: nothing left to tell
        _emit(doc, "", True, sys.stdout)


class _Stopped(BaseException):
    """SIGTERM or SIGHUP (CI, ``timeout``, a closed terminal): unwind like Ctrl-C, so
    that a running step is cancelled and the local script stopped on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, _frame: object) -> None:
    raise _Stopped(signum)


def _wants_json(argv: Sequence[str]) -> bool:
    return "--json" in argv


#: The environment variable that sets the level of the ``slurm_fsm`` logger on stderr
#: (``DEBUG``: every Slurm command with its exit code and time; default ``WARNING``).
LOG_LEVEL_ENV = "SLURM_FSM_LOG_LEVEL"


class _NotProgress(logging.Filter):
    """The progress lines print on stderr already (or ``--quiet`` asked for none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith("slurm_fsm.progress")


def configure_logging(environ: Mapping[str, str] | None = None) -> str | None:
    """The CLI's logging: the ``slurm_fsm`` logger on stderr at the level of
    :data:`LOG_LEVEL_ENV` (default ``WARNING``), its progress records left out (the
    progress lines show them). None, or the problem with the variable (exit 2)."""
    env = os.environ if environ is None else environ
    name = env.get(LOG_LEVEL_ENV, "").strip().upper() or "WARNING"
    level = logging.getLevelNamesMapping().get(name)
    if level is None:
        return (f"{LOG_LEVEL_ENV}={env.get(LOG_LEVEL_ENV)!r}: not a logging level; one of "
                "DEBUG, INFO, WARNING, ERROR")
    logger = logging.getLogger("slurm_fsm")
    for old in [h for h in logger.handlers if getattr(h, "_slurm_fsm_cli", False)]:
        logger.removeHandler(old)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("slurm-fsm: %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_NotProgress())
    handler._slurm_fsm_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = _parser(args_list[0] if args_list and not args_list[0].startswith("-")
                     else None)
    try:
        args = parser.parse_args(args_list)
    except _UsageError as exc:
        command = next((a for a in args_list if not a.startswith("-")), None)
        if _wants_json(args_list):
            _print_json_error(_error_document("BAD_INPUT", EXIT_BAD_INPUT, command, str(exc),
                                              [str(exc)]))
        parser.print_usage(sys.stderr)
        _say(str(exc))
        return EXIT_BAD_INPUT
    if args.command is None:  # bare `slurm-fsm`: the help, not a usage error
        parser.print_help()
        return 0
    problem = configure_logging()
    if problem is not None:
        _say(f"slurm-fsm: {problem}")
        return EXIT_BAD_INPUT
    previous: dict[signal.Signals, Any] = {}
    for stop in (signal.SIGTERM, signal.SIGHUP):
        try:
            previous[stop] = signal.signal(stop, _raise_stopped)
        except ValueError:  # not the main thread: signals stay as they are
            break
    try:
        return _main(args)
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)
        _settle_stderr()


def _main(args: argparse.Namespace) -> int:
    from slurm_fsm.errors import SlurmFsmError, SpecError, StateFileError, UnknownRun

    current = _Run()
    as_json = bool(getattr(args, "json", False))
    command: str = args.command
    try:
        return _dispatch(args, current)
    except (SpecError, StateFileError) as exc:
        _say(f"slurm-fsm: {exc}")
        if as_json:
            if isinstance(exc, SpecError):
                problems, file = exc.problems, exc.source
            else:
                problems, file = [exc.reason], exc.path
            if file in ("job spec", "make_spec"):  # checks of what the spec names
                file = str(args.spec)
            _print_json_error(_error_document("BAD_INPUT", EXIT_BAD_INPUT, command, str(exc),
                                              problems, file))
        return EXIT_BAD_INPUT
    except UnknownRun as exc:  # a run id that names no run: bad input
        _say(f"slurm-fsm: {exc}")
        if as_json:
            _print_json_error(_error_document("BAD_INPUT", EXIT_BAD_INPUT, command, str(exc),
                                              [str(exc)]))
        return EXIT_BAD_INPUT
    except (SlurmFsmError, OSError) as exc:
        _say(f"slurm-fsm: error: {exc}")
        if as_json:
            _emit_error(command, f"error: {exc}", [str(exc)])
        return EXIT_ERROR
    except (KeyboardInterrupt, _Stopped) as exc:
        signum = exc.signum if isinstance(exc, _Stopped) else signal.SIGINT
        name = signal.Signals(signum).name
        _say(f"slurm-fsm: stopped by {name} (the persistent allocation, if any, is kept)")
        if current.executor is not None and not as_json:  # its report is saved
            current.executor.interrupted_report(f"stopped by {name}", signum)
        if as_json:
            _emit_stopped(current, command, f"stopped by {name}", 128 + signum)
        return 128 + signum
    except Exception as exc:  # a bug: the traceback for the person, one document for a program
        import traceback

        with contextlib.suppress(OSError):
            traceback.print_exc()
        _say(f"slurm-fsm: internal error: {type(exc).__name__}: {exc}")
        if as_json:
            _emit_error(command, f"internal error: {type(exc).__name__}: {exc}",
                        [f"{type(exc).__name__}: {exc}"])
        return EXIT_ERROR


def _emit_error(command: str, summary: str, errors: list[str]) -> None:
    """With ``--json``, exit 3 without a report of the run: ``run``/``release`` print an
    ERROR report (what an orchestrator reads anyway), other commands an error document;
    both carry ``cli_exit_code``."""
    doc = _error_document("ERROR", EXIT_ERROR, command, summary, errors)
    if command in ("run", "release"):
        from slurm_fsm.results import report_of
        from slurm_fsm.runfacts import Failure, Mode, Phase, RunFacts

        failure = Failure(phase=Phase.INPUT, message=summary, errors=tuple(errors))
        report = report_of(RunFacts(mode=Mode(command), phase=Phase.INPUT, failure=failure),
                           None)
        doc = {**report.to_dict(), "cli_exit_code": EXIT_ERROR, "command": command}
    _print_json_error(doc)


def _emit_stopped(current: _Run, command: str, why: str, code: int) -> None:
    """With ``--json``: the one document, also for a command stopped by a signal (a
    CANCELLED report for ``run``/``release``)."""
    from slurm_fsm.results import report_of
    from slurm_fsm.runfacts import Mode, Phase, RunFacts

    if command not in ("run", "release"):  # the judge's word, in an error document
        stopped = report_of(RunFacts(mode=Mode.RUN, phase=Phase.INPUT, interrupted=why), None)
        _print_json_error(_error_document(stopped.status.name, code, command,
                                          stopped.summary, stopped.errors))
        return
    if current.executor is not None:
        report = current.executor.interrupted_report(why, code - 128 if code > 128 else None)
    else:
        report = report_of(RunFacts(mode=Mode(command), phase=Phase.INPUT, interrupted=why),
                           None)
    _print_json_error({**report.to_dict(), "cli_exit_code": code, "command": command})


def _add_diagram(sub: Any) -> None:
    d = sub.add_parser("diagram", help="print the state diagram")
    d.add_argument("--format", choices=("mermaid", "dot"), default="mermaid",
                   help="mermaid (default; renders in GitHub and notebooks) or Graphviz dot")
    d.add_argument("--part", choices=("all", "core", "admission", "successor", "run"),
                   default="all",
                   help="one drawing: the design card's states (core), an opt-in part "
                        "(admission, successor), or a run's own states (run: what "
                        "`slurm-fsm runs` shows, docs/detach.md); default: the whole machine")


def _diagram(part: str, fmt: str) -> str:
    """``slurm-fsm diagram``: the machine (or one drawing of it), or a run's states."""
    if part == "run":
        from slurm_fsm.runstates import run_dot, run_mermaid

        return run_mermaid() if fmt == "mermaid" else run_dot()
    from slurm_fsm.step0.table import EDGES, DiagramPart, dot_diagram, mermaid_diagram, part_edges

    drawing = None if part == "all" else DiagramPart(part)
    if fmt == "mermaid":
        return mermaid_diagram(EDGES, part=drawing)
    return dot_diagram(EDGES if drawing is None else [e for _, e in part_edges(drawing)])


def _dispatch(args: argparse.Namespace, current: _Run) -> int:
    if args.command == "diagram":
        sys.stdout.write(_diagram(args.part, args.format))
        return 0
    if args.command == "demo":
        from slurm_fsm.demo import run_demo

        return run_demo(fake=args.fake, keep=args.keep, quiet=args.quiet)
    if args.command in ("runs", "logs", "attach", "wait", "report", "cancel"):
        from slurm_fsm import cli_runs

        return cli_runs.dispatch(args)

    spec = _load_spec(args)
    fake = args.backend == "fake"
    # status with no state file asks Slurm nothing
    needs_slurm = args.command != "status" or spec.state_path.exists()
    backend = (_fake_for(args) if fake
               else _backend("slurm") if needs_slurm else _unchecked_backend())
    state_path = fake_state_path(spec) if fake else None
    if fake and not getattr(args, "quiet", False):
        _say("slurm-fsm: fake cluster: the script runs on this machine (srun runs each task "
             f"here); its allocation is kept in {fake_state_path(spec)}, never in the real "
             "state file")
    if args.command == "status":
        return _status(spec, backend, args.json, state_path, fake)
    if args.command == "plan":
        from slurm_fsm.plan import make_plan

        plan = make_plan(spec, backend)
        _emit(*_labelled(plan.to_dict(), plan.render_text(), fake), args.json, sys.stdout)
        return 0 if plan.final_state != "Failed" else EXIT_ERROR
    return _run_job(args, current, spec, backend, state_path, fake)


def _load_spec(args: argparse.Namespace) -> JobSpec:
    """The spec of ``args.spec``; for ``run``, a missing script and a script whose
    ``--container-name`` is not the spec's are problems of the spec (exit 2)."""
    from pathlib import Path

    from slurm_fsm.errors import SpecError
    from slurm_fsm.spec import JobSpec

    spec = JobSpec.from_file(Path(args.spec), strict=args.strict,
                             check_script=args.command == "run")
    if args.command == "run":  # what the script says (its --container-name)
        from slurm_fsm.scriptcheck import container_name_problems

        if problems := container_name_problems(spec):
            raise SpecError(str(args.spec), problems)
    if spec.load_warnings:
        lines = "".join(f"\n  {w}" for w in spec.load_warnings)
        _say(f"slurm-fsm: warning: job spec {args.spec}:{lines}")
    if args.backend != "fake" and (args.fake_partition or args.fake_account):
        raise SpecError(str(args.spec), ["--fake-partition/--fake-account: only with "
                                         "--backend fake"])
    return spec


def _run_job(args: argparse.Namespace, current: _Run, spec: JobSpec, backend: SlurmBackend,
             state_path: Path | None, fake: bool) -> int:
    """``run`` and ``release``: one executor run, its report printed."""
    from slurm_fsm.executor import Executor
    from slurm_fsm.progress import StderrEvents

    if args.command == "release":
        import attrs

        spec = attrs.evolve(spec, release_allocation=True)
    elif args.detach:
        return _run_detached(args, spec)
    events = (_release_events if args.command == "release" else StderrEvents)(
        quiet=args.quiet, stream_output=not args.json, report_follows=True)
    # the clock is the backend's own (SlurmBackend.clock)
    current.executor = Executor(spec, backend, events=events, state_path=state_path,
                                lease_wait_s=0.0 if args.no_wait else None)
    report = current.executor.run()
    events.close()
    _emit_verdict(*_labelled(report.to_dict(), report.render_text(), fake), args.json)
    return report.exit_code_for_cli


def _emit_verdict(doc: dict[str, Any], text: str, as_json: bool) -> None:
    """The report on stdout, best effort as progress is: stdout gone (``run SPEC 2>&1
    | head -1``) changes neither the verdict (saved by run id: ``slurm-fsm report``)
    nor the exit code, which stays the job's; stdout is pointed at /dev/null so that
    the interpreter's last flush cannot fail either."""
    try:
        _emit(doc, text, as_json, sys.stdout)
    except OSError:
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)


def _run_detached(args: argparse.Namespace, spec: JobSpec) -> int:
    """``run --detach``: a supervisor runs the job; this command returns once the job
    has started, printing the run id (or the report of a run that ended before)."""
    from pathlib import Path

    from slurm_fsm.cli_runs import print_detached
    from slurm_fsm.detach import submit

    def relay(chunk: bytes) -> None:
        if not args.quiet:
            sys.stderr.buffer.write(chunk)
            sys.stderr.flush()

    try:
        handle = submit(spec, spec_path=str(Path(args.spec).resolve()),
                        backend=args.backend,
                        fake_partitions=tuple(args.fake_partition or ()),
                        fake_accounts=tuple(args.fake_account or ()), no_wait=args.no_wait,
                        on_progress=relay)
    except KeyboardInterrupt:
        _say("slurm-fsm: detached before the job started; the run goes on (`slurm-fsm "
             "runs` shows it)")
        return 130
    return print_detached(handle, args.json)


def _release_events(**kwargs: Any) -> StderrEvents:
    """``release``'s progress on stderr: its result ("Allocation N released.") is the
    report on stdout, said once; stderr keeps what happens on the way (a wait for
    running jobs, a warning) but does not say it again (it said it twice more)."""
    from slurm_fsm.progress import StderrEvents

    class ReleaseEvents(StderrEvents):
        def message(self, text: str) -> None:
            if not text.endswith(" released."):
                super().message(text)

        def state(self, machine_state: str, detail: str = "") -> None:
            if machine_state != "Done":
                super().state(machine_state, detail)

    return ReleaseEvents(**kwargs)


#: The end of the first line of every ``--backend fake`` result on stdout: nothing ran
#: on Slurm. The line starts as a real result's does (``PASSED  (custom, one-shot)``),
#: so what reads a real first line reads the fake's.
FAKE_LABEL = "[FAKE CLUSTER (--backend fake): in memory, nothing was sent to Slurm]"


def _labelled(doc: dict[str, Any], text: str, fake: bool) -> tuple[dict[str, Any], str]:
    """A ``--backend fake`` result says so: :data:`FAKE_LABEL` at the end of the text's
    first line, ``"backend": "fake"`` in the document (a real one is unchanged)."""
    if not fake:
        return doc, text
    first, sep, rest = text.partition("\n")
    return {**doc, "backend": "fake"}, f"{first}  {FAKE_LABEL}{sep}{rest}"


def _status(spec: JobSpec, backend: SlurmBackend, as_json: bool,
            state_path: Path | None, fake: bool = False) -> int:
    from slurm_fsm.allocation import Allocation

    status = Allocation.for_spec(spec, backend, state_path=state_path).status(spec)
    _emit(*_labelled(status.to_dict(), status.render_text(), fake), as_json, sys.stdout)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
