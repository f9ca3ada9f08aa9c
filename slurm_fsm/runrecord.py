"""Run records: one per persistent run, beside the state file; each is the run's lease.

A persistent run writes ``work_dirs/.slurm_run.<run id>.json`` at the end of step 0,
while it still holds the state file's lock, and deletes it when its script and every
step the script started are gone. The record is two things at once:

* the **lease** on the allocation: while the run's orchestrator process lives (same
  host, same boot, its pid with the recorded start time), nothing cancels the
  allocation, replaces it or changes the container the run uses
  (:mod:`slurm_fsm.lease` waits for the leases, or refuses);
* the **leftovers list** of a run that died: its script's process group with the
  guard's secret token (:mod:`slurm_fsm.scriptguard`), the pids of its ``srun`` s and
  the steps it started, each as Slurm described it (:class:`StepMark`: id, name,
  ``SrunHost:Pid``, start time). The next run stops exactly those, and only once
  :func:`slurm_fsm.runsteps.steps_of` finds them again in what Slurm says now.

A record whose allocation id is not a Slurm job id (``12 34``, ``--help``, ``-1``)
is not a record: it is skipped, and :attr:`RunBook.skipped` says which file.

Every record is written through :func:`slurm_fsm.files.write_atomic` (an ``O_EXCL``
temp file with a random name, mode 0600) and read with
:func:`slurm_fsm.files.read_bounded` (``follow=False, owned=True``): a planted link,
FIFO or another user's file is skipped, never followed. A record holds the guard's
token: it is only ever readable by its owner.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from slurm_fsm.backend import StepInfo, is_job_id
from slurm_fsm.convert import (
    GOOD_ITEMS,
    OR_DEFAULT,
    READ_AS,
    JsonInt,
    Scalars,
    StepId,
    Text,
    converter,
    structure_record,
)
from slurm_fsm.errors import FileProblem
from slurm_fsm.files import read_bounded, write_atomic
from slurm_fsm.paths import RUN_ID, StatePaths
from slurm_fsm.scriptguard import boot_id, live_start_ticks, start_ticks

__all__ = ["RunBook", "RunRecord", "StepMark", "boot_id", "new_run_id", "owner_alive",
           "start_ticks"]

MAX_BYTES = 65536


@attrs.frozen(kw_only=True)
class StepMark:
    """One step as Slurm described it when its run saw it (``scontrol show step``):
    what tells that very step again, and never another one of the same id."""

    step_id: str = attrs.field(metadata={READ_AS: StepId})
    name: str = attrs.field(default="", metadata={READ_AS: Text})
    srun_host: str = attrs.field(default="", metadata={READ_AS: Text})
    srun_pid: int | None = attrs.field(default=None, metadata={READ_AS: JsonInt | None})
    start_time: str = attrs.field(default="", metadata={READ_AS: Text})

    @classmethod
    def of(cls, step: StepInfo) -> StepMark:
        return cls(step_id=step.step_id, name=step.name, srun_host=step.srun_host,
                   srun_pid=step.srun_pid, start_time=step.start_time)

    def matches(self, step: StepInfo) -> bool:
        """``step`` is the one marked: same id, name, srun host and pid, start time."""
        return (step.step_id, step.name, step.srun_host, step.srun_pid, step.start_time) \
            == (self.step_id, self.name, self.srun_host, self.srun_pid, self.start_time)

    @classmethod
    def from_json(cls, value: object) -> StepMark | None:
        """A mark from its JSON; None for anything else (a bare id of an older record
        included: an id alone proves nothing)."""
        try:
            mark: StepMark = structure_record(value, cls, "step mark")
        except ValueError:
            return None
        return mark


@attrs.frozen(kw_only=True)
class RunRecord:
    """One persistent run (see the module's text). ``steps``: the steps it started on
    ``allocation``, each as Slurm described it (:class:`StepMark`)."""

    run_id: str
    allocation: str
    pid: int
    pid_ticks: int
    host: str
    boot_id: str
    uid: int
    since: str
    spec: str = ""
    model: str = ""
    container: str = ""
    log: str = ""
    script: dict[str, str | int] = attrs.field(factory=dict, metadata={READ_AS: Scalars})
    steps: tuple[StepMark, ...] = attrs.field(default=(), metadata={GOOD_ITEMS: StepMark})
    #: the pids of the script's ``srun`` s (on ``host``): Slurm keeps a step's
    #: ``SrunHost:Pid`` after the srun is gone, so the next run can still tell its steps
    srun_pids: tuple[int, ...] = attrs.field(default=(), metadata={GOOD_ITEMS: JsonInt})
    ended: bool = attrs.field(default=False, metadata={OR_DEFAULT: True})
    #: the ids of the steps seen running while the script ran (for accounting's word on
    #: how they ended; ids alone prove nothing: never a step to stop)
    seen_steps: tuple[str, ...] = attrs.field(default=(), metadata={GOOD_ITEMS: StepId})
    #: the name of the lease step that holds the run (its own, or a ``run_many``
    #: batch's): when Slurm no longer lists it, a run of another host is gone (a lease
    #: step ends with its host)
    lease: str = attrs.field(default="", metadata={OR_DEFAULT: True})

    def to_json(self) -> bytes:
        return json.dumps(converter.unstructure(self), indent=1).encode()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord | None:
        """A record from its JSON, or None when a field is missing or of the wrong type."""
        try:
            return cls.load(data)
        except ValueError:
            return None

    @classmethod
    def load(cls, data: object) -> RunRecord:
        """A record from its JSON (unknown keys ignored; see the fields' leniency).
        Raises ValueError naming every bad field."""
        rec: RunRecord = structure_record(data, cls, "run record")
        if not RUN_ID.fullmatch(rec.run_id):
            raise ValueError(f"not a run record: run_id: not a run id, got {rec.run_id!r}")
        if not is_job_id(rec.allocation):
            raise ValueError(f"its allocation {rec.allocation!r} is not a Slurm job id")
        return rec

    @property
    def step_ids(self) -> tuple[str, ...]:
        return tuple(m.step_id for m in self.steps)

    def describe(self) -> str:
        """``pid 123 (model m, spec s.json, since ...)`` for progress messages."""
        what = ", ".join(x for x in (f"model {self.model}" if self.model else "",
                                     f"spec {self.spec}" if self.spec else "",
                                     f"since {self.since}") if x)
        return f"pid {self.pid} on {self.host} ({what})"

    def public(self) -> dict[str, Any]:
        """What ``status`` shows: everything but the guard's token."""
        script = {k: v for k, v in self.script.items() if k != "token"}
        return {"run_id": self.run_id, "allocation": self.allocation, "pid": self.pid,
                "host": self.host, "since": self.since, "spec": self.spec,
                "model": self.model, "container": self.container, "log": self.log,
                "script_pgid": script.get("pgid"), "steps": list(self.step_ids),
                "ended": self.ended}


def new_run_id() -> str:
    """A new run id: ``r`` and 12 random hex digits."""
    return "r" + secrets.token_hex(6)


def owner_alive(record: RunRecord) -> bool:
    """Is the run's orchestrator alive? Its pid with the recorded start time, on this
    host and boot, and not a zombie (killed, not yet reaped: it holds nothing). A record
    of another host cannot be checked from here: it counts as alive (a lease is never
    broken on a guess)."""
    if record.host != socket.gethostname():
        return True
    if record.boot_id != boot_id():
        return False
    return live_start_ticks(record.pid) == record.pid_ticks


#: The records this process wrote for its own runs that have not ended (absolute path
#: -> this process's pid and the file as written: inode, mtime, size):
#: :meth:`RunBook.dead` skips them unread while the file is unchanged (a run_many's
#: siblings: alive by being this process). A dict's set and pop are atomic.
_OURS_LIVE: dict[str, tuple[int, int, int, int]] = {}


_MY_TICKS: dict[int, int | None] = {}


def _is_this_process(record: RunRecord) -> bool:
    """``record`` names this very process (pid and start time), not only its pid."""
    me = os.getpid()
    if me not in _MY_TICKS:
        _MY_TICKS[me] = start_ticks(me)
    return record.pid == me and record.pid_ticks == _MY_TICKS[me]


def _signature(path: Path | str) -> tuple[int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class RunBook:
    """The run records that belong with one state file (``.slurm_alloc.json`` ->
    ``.slurm_run.<id>.json``; ``.slurm_alloc.fake.json`` -> ``.slurm_run.fake.<id>.json``)."""

    def __init__(self, state_path: Path) -> None:
        #: the files beside the state file, this book's records among them
        self.paths = StatePaths.for_state_file(state_path)
        self.folder = self.paths.folder
        #: the files :meth:`records` skipped since the book was made, each with why
        #: (said once each by :func:`slurm_fsm.runsteps.stop_leftovers`)
        self.skipped: dict[str, str] = {}

    def path(self, run_id: str) -> Path:
        """The record of run ``run_id`` (:meth:`StatePaths.run_record`)."""
        return self.paths.run_record(run_id)

    def start(self, allocation: str, *, spec: str = "", model: str = "",
              container: str = "", run_id: str | None = None, lease: str = "") -> RunRecord:
        """A new record of this process's run (the lease), written at once. Raises
        OSError or FileProblem when it cannot be written: a run without a lease must not
        start (a release would not see it). ``run_id``: one of :func:`new_run_id`
        (its lease step's name holds it), else a new one."""
        me = os.getpid()
        record = RunRecord(
            run_id=run_id or new_run_id(), allocation=allocation, pid=me,
            pid_ticks=start_ticks(me) or 0, host=socket.gethostname(), boot_id=boot_id(),
            uid=os.getuid(), since=datetime.now(UTC).isoformat(timespec="seconds"),
            spec=spec, model=model, container=container, lease=lease,
        )
        self.save(record, fsync=False)
        return record

    def save(self, record: RunRecord, *, fsync: bool = True) -> None:
        """Write ``record`` (atomically). ``fsync=False`` for a run's first record: it
        is the lease of a live process (a ``kill -9`` loses no written byte) and lists
        no step yet; a host crash ends the process, its lease and its ``srun`` s with it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.path(record.run_id)
        key = os.path.abspath(path)
        _OURS_LIVE.pop(key, None)  # never skipped while being replaced
        write_atomic(path, record.to_json(), mode=0o600, fsync=fsync)
        sig = _signature(path)
        if not record.ended and sig is not None and _is_this_process(record):
            _OURS_LIVE[key] = (record.pid, *sig)

    def delete(self, record: RunRecord) -> None:
        path = self.path(record.run_id)
        _OURS_LIVE.pop(os.path.abspath(path), None)
        with contextlib.suppress(OSError):
            path.unlink()

    def _names(self) -> Iterator[str]:
        try:
            with os.scandir(self.folder) as entries:
                for entry in entries:
                    if self.paths.run_id_of(entry.name) is not None:
                        yield entry.name
        except OSError:
            return

    def records(self, *, skip_ours: bool = False) -> list[RunRecord]:
        """Every readable record, oldest first. A link, a FIFO, another user's file,
        or one that is not a record is skipped (and never followed). ``skip_ours``:
        not the live records of this process's own runs (not read)."""
        found: list[RunRecord] = []
        me = os.getpid()
        for name in self._names():
            if skip_ours and self._ours_unchanged(self.folder / name, me):
                continue
            try:
                raw = read_bounded(self.folder / name, MAX_BYTES, follow=False, owned=True)
                data = json.loads(raw.decode("utf-8", "replace"))
            except (FileProblem, OSError, ValueError):
                continue
            try:
                record = RunRecord.load(data)
            except ValueError as exc:
                if isinstance(data, dict):
                    self.skipped[str(self.folder / name)] = str(exc)
                continue
            if self.paths.run_id_of(name) is not None and name == self.path(record.run_id).name:
                found.append(record)
            else:
                self.skipped[str(self.folder / name)] = "it is not a run record of this name"
        return sorted(found, key=lambda r: (r.since, r.run_id))

    @staticmethod
    def _ours_unchanged(path: Path, me: int) -> bool:
        """``path`` is a live record this process wrote, unchanged since."""
        known = _OURS_LIVE.get(os.path.abspath(path))
        return known is not None and known[0] == me and known[1:] == _signature(path)

    def live(self, allocation: str | None = None) -> list[RunRecord]:
        """The leases: records of jobs that have not ended, whose orchestrator lives (on
        ``allocation`` if given), this process's own included."""
        return [r for r in self.records() if not r.ended and owner_alive(r)
                and (allocation is None or r.allocation == allocation)]

    def dead(self, leases: Callable[[str], set[str] | None] | None = None
             ) -> list[RunRecord]:
        """Leftovers for the next run to stop: records whose orchestrator is gone, and
        records of jobs that ended with steps Slurm could not stop (kept, ``ended``).

        A record of another host cannot be checked by its pid: with ``leases`` (the
        names of the lease steps Slurm lists on an allocation, None when it cannot
        say), it is gone when its lease step is no longer listed (a lease step ends
        with its host, :data:`slurm_fsm.slurmcli.LEASE_TASK`)."""
        here = socket.gethostname()
        asked: dict[str, set[str] | None] = {}

        def gone(r: RunRecord) -> bool:
            if r.ended or not owner_alive(r):
                return True
            if leases is None or r.host == here or not r.lease:
                return False
            if r.allocation not in asked:
                asked[r.allocation] = leases(r.allocation)
            listed = asked[r.allocation]
            return listed is not None and r.lease not in listed

        return [r for r in self.records(skip_ours=True) if gone(r)]
