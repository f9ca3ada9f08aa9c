"""The warmer: sets a queued successor up while the old allocation still serves.

The run that queues a successor (QueueingSuccessor, :mod:`slurm_fsm.handoff`) starts the
warmer as a detached process (:func:`spawner`), so that the set-up outlives the run:
``python -m slurm_fsm.warmer <state file>``, the successor's spec on its stdin. The spec
never goes through a file: a file in a shared ``work_dirs`` can be swapped by another
member of its group between the write and the read, and the warmer would then run their
spec (their mounts over ``repo_root``, their build backend) as you. The pipe is held by
the spawner alone, and what comes through it is bounded (:data:`SPEC_LIMIT`). It runs
the machine's own step 0 on the successor's state file
(``.slurm_alloc.successor.json``), holding that file's lock the whole time (so runs can
tell it is alive): Validating (waits while the successor is PENDING), then Importing and
Installing, and stops at Ready. It never allocates and never cancels: a successor that
is gone or unusable is left to the next run's validation (DROP_SUCCESSOR). A warmer that
dies (``kill -9``) leaves the file with ``installed: false``; the next run that needs
the successor switches to it and finishes the set-up itself (0F).

Option B of the design note (a keeper batch job doing the set-up on the node) needs no
login-node process to survive, but adds a batch step that the lease and GPU accounting
would have to ignore; the detached warmer reuses step 0 as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import attrs

from slurm_fsm import files
from slurm_fsm.backend import SlurmBackend
from slurm_fsm.clock import Clock
from slurm_fsm.errors import SlurmFsmError
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.paths import StatePaths
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import StateStore
from slurm_fsm.step0.table import State
from slurm_fsm.successor import Phase, read_successor, write_successor

__all__ = ["SPEC_LIMIT", "main", "spawner", "spec_digest", "warm", "warmer_for"]

#: The most bytes of spec the warmer reads from its stdin (a spec is a few KiB).
SPEC_LIMIT = 1 << 20

#: The states whose work the warmer does; any other ends it (it never allocates or
#: cancels).
_WARMING = frozenset({State.Validating, State.Importing, State.Installing})


def warm(spec: JobSpec, backend: SlurmBackend, state_path: Path, *,
         clock: Clock | None = None, log: Callable[[str], None] | None = None) -> State:
    """Set the successor of ``state_path``'s allocation up (see the module). ``spec`` is
    the successor's: the spec with the successor's job name. Returns the state it
    stopped in (Ready when set up)."""
    paths = StatePaths.for_state_file(state_path)
    store = StateStore(paths.successor_state)
    wait = float(spec.alloc_time_limit.seconds or 86400) if spec.alloc_time_limit.is_finite \
        else 86400.0
    m = AllocationMachine(attrs.evolve(spec, warm_successor=False), backend, clock=clock,
                          store=store, log=log, pending_wait_s=wait,
                          salloc_log=paths.successor_salloc_log)
    with m.locked():
        if not store.exists():
            return m.outcome().state
        # the warming states only; a successor found gone (NoState) ends it: never a
        # fresh start, which would allocate
        done = m.prepare(within=_WARMING, until=lambda o: o.state is State.NoState)
    if done.setup_note and log is not None:  # which path its container took, how long
        log(f"successor set up: {done.setup_note}")
    record_path = paths.successor_record
    record = read_successor(record_path)
    if record is not None:
        ready = done.state is State.Ready
        phase = Phase.READY if ready else Phase.FAILED
        detail = "" if ready else f"warmer stopped in {done.state.value}" + (
            f": {done.failure.message}" if done.failure else "")
        with contextlib.suppress(OSError):  # a hint only
            write_successor(record_path, attrs.evolve(record, phase=phase, detail=detail))
    return done.state


def spec_digest(spec: JobSpec) -> str:
    """A short digest of ``spec`` (its JSON form), named in the warmer's log."""
    text = json.dumps(spec.to_dict(), sort_keys=True).encode("utf-8")
    return hashlib.sha256(text).hexdigest()[:16]


def spawner(state_path: Path) -> Callable[[JobSpec], int | None]:
    """A :data:`slurm_fsm.handoff.Warmer` that starts ``python -m slurm_fsm.warmer``
    detached (its own session, output in ``work_dirs/.slurm_fsm_warmer.log``), the spec
    written to its stdin and nowhere else."""

    def spawn(spec: JobSpec) -> int | None:
        log_path = StatePaths.for_state_file(state_path).warmer_log
        data = json.dumps(spec.to_dict()).encode("utf-8")
        try:
            with files.open_private(log_path, append=True, mode=0o600) as out:
                proc = subprocess.Popen(  # noqa: S603 - argument list, no shell
                    [sys.executable, "-m", "slurm_fsm.warmer", str(state_path)],
                    stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True, close_fds=True)
        except OSError:
            return None
        try:
            assert proc.stdin is not None  # stdin=PIPE above
            with proc.stdin:
                proc.stdin.write(data)
        except OSError:  # it died before reading: no warmer
            proc.kill()
            proc.wait()
            return None
        # reaped in a daemon thread (never a zombie; it outlives this process anyway)
        threading.Thread(target=proc.wait, name=f"reap-warmer-{proc.pid}",
                         daemon=True).start()
        return proc.pid

    return spawn


def warmer_for(spec: JobSpec, backend: SlurmBackend,
               state_path: Path) -> Callable[[JobSpec], int | None] | None:
    """The warmer a run starts: the detached process over the real backend (it makes
    its own); None for another backend (a fake cluster lives in its process: the run
    that needs the successor sets it up itself, 0F) or without ``warm_successor``."""
    from slurm_fsm.sharedview import unwrap
    from slurm_fsm.subprocess_backend import SubprocessBackend

    # a run_many run's backend wraps the real one; an agent's (slurm_fsm.agent) does
    # not count: a warmer it started would die with the agent's step
    if not spec.warm_successor or not isinstance(unwrap(backend), SubprocessBackend):
        return None
    return spawner(state_path)


def _read_spec(stream: BinaryIO) -> JobSpec:
    """The spec on ``stream`` (at most :data:`SPEC_LIMIT` bytes); SpecError or
    ValueError when it is not one."""
    data = stream.read(SPEC_LIMIT + 1)
    if len(data) > SPEC_LIMIT:
        raise ValueError(f"the spec on stdin is too big (over {SPEC_LIMIT} bytes)")
    return JobSpec.from_dict(json.loads(data.decode("utf-8")), check_script=False)


def main(argv: list[str] | None = None) -> int:
    """``python -m slurm_fsm.warmer STATE_FILE``, the successor's spec (JSON) on stdin:
    :func:`warm` over the real backend; exit 0 when the successor is set up, 2 when the
    call or the spec is wrong."""
    from slurm_fsm.subprocess_backend import SubprocessBackend

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m slurm_fsm.warmer STATE_FILE  (the spec as JSON on stdin)",
              file=sys.stderr)
        return 2
    try:
        spec = _read_spec(sys.stdin.buffer)
    except (ValueError, SlurmFsmError) as exc:
        print(f"warmer {os.getpid()}: no spec: {exc}", file=sys.stderr)
        return 2
    print(f"warmer {os.getpid()}: setting up the successor of {args[0]} (job "
          f"{spec.job_name}, spec {spec_digest(spec)})", flush=True)
    state = warm(spec, SubprocessBackend(), Path(args[0]),
                 log=lambda line: print(line, flush=True))
    print(f"warmer {os.getpid()}: {state.value}", flush=True)
    return 0 if state is State.Ready else 1


if __name__ == "__main__":
    sys.exit(main())
