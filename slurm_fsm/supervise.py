"""The supervisor of a detached run: the run's owner on the login node.

``slurm-fsm run SPEC --detach`` (and :func:`slurm_fsm.detach.submit`) starts
``python -m slurm_fsm.supervise STATE_FILE RUN_ID`` as a process of its own session
(:func:`spawn`, as the warmer is started), its task (the spec as loaded, the backend)
on its stdin, never through a file another user could swap, bounded at
:data:`TASK_LIMIT`. It runs the job exactly as a foreground run does (one
:class:`~slurm_fsm.executor.Executor` run, step 0 included), with its progress in
``work_dirs/.slurm_run.<id>.out`` instead of a terminal, and the run's owner record
naming it (:class:`~slurm_fsm.runowner.Owner` ``SUPERVISOR``). The shell that asked can
go: the run's script is guarded by the supervisor, which lives on.

SIGTERM or SIGHUP (``slurm-fsm cancel``) stops it as they stop a foreground run: the
job's steps are cancelled (the allocation is kept) and the CANCELLED report is saved.
When the supervisor itself dies (``kill -9``, the login node lost), its script dies
with it (the guard), and ``wait``/``report`` rebuild the verdict
(:func:`slurm_fsm.detach.settle`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, BinaryIO

import attrs

from slurm_fsm import files
from slurm_fsm.runowner import Owner, RunFiles, is_run_id

__all__ = ["OUTPUT_LIMIT", "TASK_LIMIT", "Task", "main", "spawn"]

#: The most bytes of task the supervisor reads from its stdin.
TASK_LIMIT = 1 << 20
#: The most bytes of the job's own output the progress file repeats (the job's log has
#: all of it: ``slurm-fsm logs RUN_ID``); a 2 GB log is not written twice.
OUTPUT_LIMIT = 16 << 20


@attrs.frozen(kw_only=True)
class Task:
    """What a supervisor runs: the spec (``JobSpec.to_dict()``), where it came from,
    the backend (``slurm`` or ``fake``, with the fake's partitions and accounts), and
    whether it may wait for other runs' leases (``no_wait``: refuse)."""

    spec: dict[str, Any]
    spec_path: str = ""
    backend: str = "slurm"
    fake_partitions: tuple[str, ...] = ()
    fake_accounts: tuple[str, ...] = ()
    no_wait: bool = False

    def to_json(self) -> bytes:
        data = attrs.asdict(self)
        data["fake_partitions"] = list(self.fake_partitions)
        data["fake_accounts"] = list(self.fake_accounts)
        return json.dumps(data).encode("utf-8")

    @classmethod
    def read(cls, stream: BinaryIO) -> Task:
        """The task on ``stream``; ValueError when it is not one."""
        raw = stream.read(TASK_LIMIT + 1)
        if len(raw) > TASK_LIMIT:
            raise ValueError(f"the task on stdin is too big (over {TASK_LIMIT} bytes)")
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
            raise ValueError("the task on stdin is not a JSON object with a spec")
        backend = data.get("backend", "slurm")
        if backend not in ("slurm", "fake"):
            raise ValueError(f"backend: {backend!r} is neither slurm nor fake")
        lists = [data.get(k) or [] for k in ("fake_partitions", "fake_accounts")]
        if not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
                   for v in lists):
            raise ValueError("fake_partitions/fake_accounts: lists of names")
        return cls(spec=data["spec"], spec_path=str(data.get("spec_path", "")),
                   backend=backend, fake_partitions=tuple(lists[0]),
                   fake_accounts=tuple(lists[1]), no_wait=bool(data.get("no_wait")))


def spawn(task: Task, state_path: Path, run_id: str) -> subprocess.Popen[bytes]:
    """Start the supervisor of run ``run_id`` detached (its own session), its output in
    the run's progress file, ``task`` written to its stdin. Raises OSError."""
    progress = RunFiles(state_path).progress_path(run_id)
    progress.parent.mkdir(parents=True, exist_ok=True)
    with files.open_private(progress, append=True, mode=0o600) as out:
        proc = subprocess.Popen(  # noqa: S603 - argument list, no shell
            [sys.executable, "-m", "slurm_fsm.supervise", str(state_path), run_id],
            stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True)
    try:
        assert proc.stdin is not None  # stdin=PIPE above
        with proc.stdin:
            proc.stdin.write(task.to_json())
    except OSError:
        proc.kill()
        proc.wait()
        raise
    # reaped in a daemon thread (never a zombie while this process lives)
    threading.Thread(target=proc.wait, name=f"reap-supervisor-{proc.pid}",
                     daemon=True).start()
    return proc


class _Stopped(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, _frame: object) -> None:
    raise _Stopped(signum)


def _events() -> Any:
    """The supervisor's progress: a foreground run's, into the progress file, with at
    most :data:`OUTPUT_LIMIT` bytes of the job's own output."""
    from slurm_fsm.progress import StderrEvents

    class Progress(StderrEvents):
        written = 0

        def output(self, text: str) -> None:
            if self.written < OUTPUT_LIMIT:
                self.written += len(text)
                super().output(text if self.written < OUTPUT_LIMIT else
                               text + f"\n[slurm-fsm: the job's output goes on in its log "
                               f"only, past {OUTPUT_LIMIT >> 20} MiB here]\n")

    return Progress(stream_output=True, stream=sys.stdout, plain_interval_s=10.0)


def _backend(task: Task, allocation: str = "", *, state_path: Path | None = None,
             run_id: str = "") -> Any:
    if task.backend == "fake":
        from slurm_fsm.fakecli import fake_backend

        return fake_backend(list(task.fake_partitions), list(task.fake_accounts))
    from slurm_fsm.subprocess_backend import SubprocessBackend

    if allocation:  # the agent: never allocates, never cancels its own allocation
        from slurm_fsm.agent import AgentBackend

        # nor takes its lease under the name of its supervisor's (the record names it)
        record = RunFiles(state_path).owner(run_id) if state_path is not None else None
        return AgentBackend.wrap(SubprocessBackend(), allocation,
                                 record.lease if record is not None else "")
    return SubprocessBackend()


def _hand_over(task: Task, executor: Any) -> Any:
    """The supervisor's hand-over of ``executor``'s run to an agent
    (:func:`slurm_fsm.agent.hand_over`), for PersistentRun.hand_over; None when its
    backend cannot start one (or ``SLURM_FSM_AGENT=off``)."""
    from slurm_fsm import agent

    backend = executor.backend
    if not agent.agent_enabled(backend):
        return None
    owned = executor.owned

    def hand(alloc: Any) -> str | None:
        nodes = backend.expand_nodelist(alloc.nodelist) if alloc.nodelist else []
        why = agent.hand_over(backend, owned.files, owned.run_id, alloc.job_id, nodes,
                              task.to_json(), say=executor.events.message)
        if why is not None and owned.record is not None:  # the run stays this process's
            with contextlib.suppress(OSError):
                owned.files.write_owner(owned.record)
        return why

    return hand


def _run(task: Task, state_path: Path, run_id: str, allocation: str = "") -> int:
    """The run, as the supervisor (on the login node) or as its agent (``allocation``:
    inside that allocation)."""
    from slurm_fsm.agent import HandedOver
    from slurm_fsm.executor import Executor
    from slurm_fsm.spec import JobSpec

    spec = JobSpec.from_dict(task.spec, check_script=False)
    events = _events()
    executor = Executor(spec, _backend(task, allocation, state_path=state_path,
                                       run_id=run_id), events=events,
                        state_path=state_path, run_id=run_id,
                        owner=Owner.AGENT if allocation else Owner.SUPERVISOR,
                        spec_path=task.spec_path,
                        progress=str(RunFiles(state_path).progress_path(run_id)),
                        lease_wait_s=0.0 if task.no_wait else None)
    if not allocation:
        executor.hand_over = _hand_over(task, executor)
    who = "agent" if allocation else "supervisor"
    executor.note(f"run by its {who} on {os.uname().nodename} (pid {os.getpid()})"
                  + (f", a step of allocation {allocation}: it outlives the login node"
                     if allocation else ", on the login node"))
    try:
        report = executor.run()
    except HandedOver as handed:
        print(f"supervisor {os.getpid()}: {handed}", flush=True)
        return 0
    except (KeyboardInterrupt, _Stopped) as exc:
        signum = exc.signum if isinstance(exc, _Stopped) else signal.SIGINT
        name = signal.Signals(signum).name
        report = executor.interrupted_report(f"stopped by {name} (slurm-fsm cancel, or a "
                                             f"signal to the {who})", signum)
    print(f"{who} {os.getpid()}: {report.status.name}: {report.summary}", flush=True)
    return report.exit_code_for_cli


def _agent_output(state_path: Path, run_id: str) -> None:
    """The agent writes its progress to the run's progress file itself: never through
    the ``srun`` that started it (its host may be gone)."""
    progress = RunFiles(state_path).progress_path(run_id)
    with files.open_private(progress, append=True, mode=0o600) as out:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)


def main(argv: list[str] | None = None) -> int:
    """``python -m slurm_fsm.supervise STATE_FILE RUN_ID``, the task (JSON) on stdin;
    ``--agent STATE_FILE RUN_ID ALLOCATION``: the run's agent, inside that allocation
    (:mod:`slurm_fsm.agent`)."""
    from slurm_fsm.errors import SlurmFsmError

    args = sys.argv[1:] if argv is None else argv
    allocation = ""
    if args[:1] == ["--agent"] and len(args) == 4 and args[3].isdigit():
        args, allocation = args[1:3], args[3]
    if len(args) != 2 or not is_run_id(args[1]):
        print("usage: python -m slurm_fsm.supervise [--agent] STATE_FILE RUN_ID "
              "[ALLOCATION]  (the task as JSON on stdin)", file=sys.stderr)
        return 2
    try:
        task = Task.read(sys.stdin.buffer)
    except (ValueError, OSError) as exc:
        print(f"supervisor {os.getpid()}: no task: {exc}", file=sys.stderr)
        return 2
    state_path = Path(args[0])
    who = "supervisor"
    if allocation:
        from slurm_fsm.agent import scrub_environ

        step = scrub_environ(os.environ)
        who = f"agent (step {allocation}.{step} on {os.uname().nodename})"
        try:
            _agent_output(state_path, args[1])
        except OSError as exc:
            print(f"agent {os.getpid()}: cannot write the progress file: {exc}",
                  file=sys.stderr)
            return 2
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop)
    print(f"{who} {os.getpid()}: run {args[1]} of {task.spec_path or '(a spec)'}",
          flush=True)
    try:
        return _run(task, state_path, args[1], allocation)
    except (SlurmFsmError, OSError) as exc:
        print(f"{who} {os.getpid()}: error: {exc}", flush=True)
        return 3


if __name__ == "__main__":
    sys.exit(main())
