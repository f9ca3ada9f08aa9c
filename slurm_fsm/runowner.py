"""Who owns a run, and the verdict that outlives it.

Every run (foreground or detached, persistent or one-shot) has a run id and, beside the
state file, two files of its own (named after the state file as the run records are,
:class:`slurm_fsm.runrecord.RunBook`):

* ``.slurm_run.<id>.owner.json``, the **owner record** (:class:`OwnerRecord`): written
  when the run starts, by the process that owns it (the orchestrator in the foreground,
  the supervisor of a detached run, :mod:`slurm_fsm.supervise`); it says who that is
  (pid with its start time, host, boot), the spec, and, once the job has started, its
  log, its job or allocation id. Another shell, on any login node that shares the
  checkout, finds the run by it (``slurm-fsm runs``, ``logs``, ``attach``, ``wait``).
* ``.slurm_run.<id>.report.json``, the **saved report** (:class:`SavedReport`): written
  atomically by whoever judged the run, the moment it is judged, a stopped foreground
  run included. When the owner is gone without one, :func:`slurm_fsm.detach.settle`
  makes it from what is left, through the same judge, and says so.

A detached run also has ``.slurm_run.<id>.out``: its supervisor's progress (what a
foreground run prints on stderr), which ``attach`` replays.

Files are written with :func:`slurm_fsm.files.write_atomic` (mode 0600) and read with
:func:`slurm_fsm.files.read_bounded` (``follow=False, owned=True``): a planted link or
another user's file is never read.
"""

from __future__ import annotations

import _thread
import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import attrs

from slurm_fsm.convert import READ_AS, JsonInt, JsonObject, Text, converter, structure_record
from slurm_fsm.errors import FileProblem
from slurm_fsm.events import Events
from slurm_fsm.files import read_bounded, write_atomic
from slurm_fsm.paths import RUN_ID, StatePaths
from slurm_fsm.report import Report
from slurm_fsm.runlog import MAX_BYTES, process_alive
from slurm_fsm.runrecord import boot_id
from slurm_fsm.runstates import RunEvent, RunPhase, next_phase
from slurm_fsm.scriptguard import start_ticks

__all__ = ["CANCEL_POLL_S", "HEARTBEAT_S", "HEARTBEAT_STALE_S", "KEEP_RUNS", "MAX_BYTES",
           "OnStarted", "OwnedRun", "Owner", "OwnerRecord", "RunFiles", "RunPhase", "SavedReport",
           "is_run_id", "owner_alive"]

#: How many finished runs' files a checkout keeps (the oldest are removed beyond).
KEEP_RUNS = 500
#: The most bytes of a cancel's ask (who asked) read or written.
MAX_ASK = 512
#: An ask's second line when its owner could not be told: the owner looks for it.
_UNTOLD = "untold"
#: How often a run's owner looks for a cancel asked where it could not be told.
CANCEL_POLL_S = 1.0
#: How often a run's owner touches its owner record while it lives (its heartbeat).
HEARTBEAT_S = 30.0
#: An owner on another host whose record was not touched for this long is gone (where
#: no lease step can tell: before its job started).
HEARTBEAT_STALE_S = 5 * HEARTBEAT_S


def is_run_id(text: str) -> bool:
    """``text`` is a run id (``r`` and 12 hex digits)."""
    return RUN_ID.fullmatch(text) is not None


class Owner(Enum):
    """Who runs a run: the process that was asked in the foreground, a detached
    supervisor (:mod:`slurm_fsm.supervise`) on the login node, or the agent it handed
    the run to, inside the allocation (:mod:`slurm_fsm.agent`)."""

    FOREGROUND = "foreground"
    SUPERVISOR = "supervisor"
    #: a detached run's agent, inside its allocation (:mod:`slurm_fsm.agent`)
    AGENT = "agent"


#: an owner record's integers and texts are JSON's own (not a bool, not a number as text)
_INT = {READ_AS: JsonInt}
_TEXT = {READ_AS: Text}


@attrs.frozen(kw_only=True)
class OwnerRecord:
    """One run's owner and what another shell needs to find its job (the module)."""

    run_id: str
    owner: Owner
    pid: int = attrs.field(metadata=_INT)
    pid_ticks: int = attrs.field(metadata=_INT)
    host: str
    boot_id: str
    uid: int = attrs.field(metadata=_INT)
    since: str
    mode: str
    spec_path: str = attrs.field(default="", metadata=_TEXT)
    #: the spec as the run used it (``JobSpec.to_dict``): what a rebuild judges with
    spec: dict[str, Any] = attrs.field(factory=dict, metadata={READ_AS: JsonObject})
    phase: RunPhase = RunPhase.STARTING
    log: str = attrs.field(default="", metadata=_TEXT)
    job_id: str = attrs.field(default="", metadata=_TEXT)
    allocation_id: str = attrs.field(default="", metadata=_TEXT)
    #: a detached run's progress file (its supervisor's output)
    progress: str = attrs.field(default="", metadata=_TEXT)
    #: a persistent run's lease step (its own or its ``run_many`` batch's): when Slurm
    #: no longer lists it, its owner's host is gone
    lease: str = attrs.field(default="", metadata=_TEXT)
    #: a persistent run's script's exit code once it has ended (phase ENDED)
    exit_code: int | None = attrs.field(default=None, metadata={READ_AS: JsonInt | None})

    @classmethod
    def new(cls, run_id: str, owner: Owner, *, mode: str, spec_path: str,
            spec: Mapping[str, Any], progress: str = "") -> OwnerRecord:
        """A record naming this process as the run's owner."""
        me = os.getpid()
        return cls(run_id=run_id, owner=owner, pid=me, pid_ticks=start_ticks(me) or 0,
                   host=socket.gethostname(), boot_id=boot_id(), uid=os.getuid(),
                   since=datetime.now(UTC).isoformat(timespec="seconds"), mode=mode,
                   spec_path=spec_path, spec=dict(spec), progress=progress)

    def to_json(self) -> bytes:
        return json.dumps(converter.unstructure(self), indent=1).encode()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OwnerRecord | None:
        """A record from its JSON; None when a field is missing or of the wrong type."""
        try:
            return cls.load(data)
        except ValueError:
            return None

    @classmethod
    def load(cls, data: object) -> OwnerRecord:
        """A record from its JSON (unknown keys ignored). Raises ValueError naming every
        bad field."""
        rec: OwnerRecord = structure_record(data, cls, "run owner record")
        if not is_run_id(rec.run_id):
            raise ValueError(f"not a run owner record: run_id: not a run id, got "
                             f"{rec.run_id!r}")
        return rec


def owner_alive(record: OwnerRecord) -> bool | None:
    """Is the run's owner alive? True or False on its own host (pid with its start
    time, same boot); None on another host: it cannot be told from here."""
    return process_alive(record.host, record.boot_id, record.pid, record.pid_ticks)


@attrs.frozen(kw_only=True)
class SavedReport:
    """A run's verdict as saved: the report, who judged it (``live``: the run's owner;
    ``rebuilt``: another process, from what the run left) and when."""

    run_id: str
    report: Report
    source: str = "live"
    saved_at: str = ""
    spec_path: str = ""

    def to_json(self) -> bytes:
        return json.dumps({"run_id": self.run_id, "source": self.source,
                           "saved_at": self.saved_at, "spec_path": self.spec_path,
                           "report": self.report.to_dict()}, indent=1).encode()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SavedReport | None:
        try:
            report = Report.from_dict(data["report"])
            run_id = data["run_id"]
            if not isinstance(run_id, str) or not is_run_id(run_id):
                return None
            return cls(run_id=run_id, report=report, source=str(data.get("source", "")),
                       saved_at=str(data.get("saved_at", "")),
                       spec_path=str(data.get("spec_path", "")))
        except (KeyError, TypeError, ValueError):
            return None


def _stop_main(ending: threading.Event) -> bool:
    """Stop the main thread as a SIGTERM stops it, where the process handles SIGTERM
    (the CLI, a supervisor, an agent: the run's steps are stopped and its CANCELLED
    report saved) and the run is not ``ending`` already. True when it was stopped (or
    will never be: no handler); False to look again."""
    if not callable(signal.getsignal(signal.SIGTERM)):
        return True  # a library's run: the ask is judged, not acted on
    if ending.is_set():
        return True
    _thread.interrupt_main(signal.SIGTERM)
    return True


class RunFiles:
    """The per-run files beside one state file (see the module; their names are
    :class:`slurm_fsm.paths.StatePaths`')."""

    def __init__(self, state_path: Path) -> None:
        self.paths = StatePaths.for_state_file(state_path)
        self.folder = self.paths.folder

    def owner_path(self, run_id: str) -> Path:
        return self.paths.run_owner(run_id)

    def report_path(self, run_id: str) -> Path:
        return self.paths.run_report(run_id)

    def status_path(self, run_id: str) -> Path:
        """Where a persistent run's script guard writes the script's exit status."""
        return self.paths.run_status(run_id)

    def script_status(self, run_id: str) -> int | None:
        """The exit status the run's script guard wrote as the script ended by itself
        (:data:`slurm_fsm.scriptguard.STATUS_ENV`), or None (none written: the script
        still runs, or was stopped; unreadable, planted link, another user's)."""
        try:
            text = read_bounded(self.status_path(run_id), 64, follow=False, owned=True)
        except (FileProblem, OSError):
            return None
        try:
            code = int(text.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            return None
        return code if 0 <= code <= 255 else None

    def progress_path(self, run_id: str) -> Path:
        return self.paths.run_progress(run_id)

    def cancel_path(self, run_id: str) -> Path:
        return self.paths.run_cancel(run_id)

    def ask_cancel(self, run_id: str, who: str, *, told: bool = True) -> None:
        """Write that ``who`` asked to cancel the run (atomically, synced), before any
        of its processes is told: whichever process judges the run reads it
        (:meth:`cancel_asked`), so a script that dies of the cancel before its owner
        hears of it is CANCELLED, never FAILED. ``told`` False: nobody can signal the
        owner from where it was asked (another login node); the owner looks for such
        an ask itself (:meth:`cancel_untold`). OSError when it cannot be written."""
        self.folder.mkdir(parents=True, exist_ok=True)
        line = (who.strip().splitlines() or ["a cancel"])[0].encode()[:MAX_ASK - 16]
        write_atomic(self.cancel_path(run_id),
                     line + f"\n{'told' if told else _UNTOLD}\n".encode(), mode=0o600)

    def _ask(self, run_id: str) -> list[str] | None:
        try:
            text = read_bounded(self.cancel_path(run_id), MAX_ASK, follow=False, owned=True)
        except (FileProblem, OSError):
            return None
        return text.decode("utf-8", "replace").splitlines() or [""]

    def cancel_asked(self, run_id: str) -> str | None:
        """Who asked to cancel the run (:meth:`ask_cancel`), or None: none asked (or
        unreadable, a planted link, another user's)."""
        ask = self._ask(run_id)
        return None if ask is None else (ask[0].strip() or "a cancel")

    def cancel_asked_before(self, run_id: str) -> str | None:
        """:meth:`cancel_asked`, when asked before the script's guard wrote that the
        script ended by itself (:meth:`script_status`; not written: it did not): an ask
        after that end is not the run's verdict. For a verdict rebuilt after its owner."""
        asked = self.cancel_asked(run_id)
        try:
            ended = self.status_path(run_id).stat().st_mtime
            at = self.cancel_path(run_id).stat().st_mtime
        except OSError:
            return asked
        return asked if at <= ended else None

    def withdraw_cancel(self, run_id: str) -> None:
        """Remove the ask (it could not be passed on: nobody was told)."""
        with contextlib.suppress(OSError):
            self.cancel_path(run_id).unlink()

    def cancel_untold(self, run_id: str) -> bool:
        """A cancel was asked where its owner could not be told (``told=False``)."""
        ask = self._ask(run_id)
        return ask is not None and ask[1:2] == [_UNTOLD]

    # ------------------------------------------------------------------- writing
    def write_owner(self, record: OwnerRecord) -> None:
        """Write ``record`` (atomically); OSError when it cannot be."""
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomic(self.owner_path(record.run_id), record.to_json(), mode=0o600,
                     fsync=False)

    def save_report(self, saved: SavedReport) -> None:
        """Write the verdict (atomically, synced: it is what outlives the run), then
        mark the owner record done and keep at most :data:`KEEP_RUNS` runs' files."""
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomic(self.report_path(saved.run_id), saved.to_json(), mode=0o600)
        record = self.owner(saved.run_id)
        done = None if record is None else next_phase(record.phase, RunEvent.JUDGED)
        if record is not None and done is not None and record.phase is not done:
            with contextlib.suppress(OSError):
                self.write_owner(attrs.evolve(record, phase=done))
        self._trim()

    def _names(self) -> list[str]:
        """The run ids of the owner records here (names only: nothing is read)."""
        try:
            with os.scandir(self.folder) as entries:
                names = [e.name for e in entries]
        except OSError:
            return []
        return [i for n in names if (i := self.paths.run_owner_id_of(n)) is not None]

    def _trim(self) -> None:
        if len(self._names()) <= KEEP_RUNS:  # the usual case: one scandir, nothing read
            return
        records = self.owners()
        for old in records[:max(0, len(records) - KEEP_RUNS)]:
            if old.phase is RunPhase.DONE:
                for path in (self.owner_path(old.run_id), self.report_path(old.run_id),
                             self.progress_path(old.run_id), self.status_path(old.run_id),
                             self.cancel_path(old.run_id)):
                    with contextlib.suppress(OSError):
                        path.unlink()

    # ------------------------------------------------------------------- reading
    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(read_bounded(path, MAX_BYTES, follow=False, owned=True))
        except (FileProblem, OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def owner(self, run_id: str) -> OwnerRecord | None:
        data = self._read(self.owner_path(run_id))
        record = OwnerRecord.from_dict(data) if data is not None else None
        return record if record is not None and record.run_id == run_id else None

    def owner_problem(self, run_id: str) -> str | None:
        """Why run ``run_id``'s owner record, there, is no record: its file and every
        bad field. None when it reads, or there is none."""
        path = self.owner_path(run_id)
        if not os.path.lexists(path):
            return None
        data = self._read(path)
        if data is None:
            return (f"{path} cannot be read (not a JSON object, not a regular file of "
                    "this user's, or too big)")
        try:
            OwnerRecord.load(data)
        except ValueError as exc:
            return f"{path}: {exc}"
        return None

    def report(self, run_id: str) -> SavedReport | None:
        data = self._read(self.report_path(run_id))
        saved = SavedReport.from_dict(data) if data is not None else None
        return saved if saved is not None and saved.run_id == run_id else None

    def heartbeat_age(self, run_id: str, now: float | None = None) -> float | None:
        """Seconds since the run's owner record was last written or touched (its owner's
        heartbeat, :data:`HEARTBEAT_S`); None when there is none."""
        try:
            mtime = self.owner_path(run_id).lstat().st_mtime
        except OSError:
            return None
        return max(0.0, (time.time() if now is None else now) - mtime)

    def owners(self) -> list[OwnerRecord]:
        """Every readable owner record, oldest first."""
        found = [r for i in self._names() if (r := self.owner(i)) is not None]
        return sorted(found, key=lambda r: (r.since, r.run_id))


class OwnedRun:
    """One run's owner record and saved report, as its owner keeps them: written when
    the run begins, told when the job starts, the verdict saved when it is judged. A
    file that cannot be written is a warning, never a failed run."""

    def __init__(self, files: RunFiles, run_id: str, owner: Owner, *, spec_path: str,
                 progress: str = "") -> None:
        self.files = files
        self.run_id = run_id
        self.owner = owner
        self.spec_path = spec_path
        self.progress = progress
        self.record: OwnerRecord | None = None
        self._saved = threading.Event()  # ends the heartbeat
        #: the script has ended, or the run is being judged: an ask is no longer acted
        #: on, and the judge reads the ask as it was at the script's end
        self._ending = threading.Event()
        self._script_ended = False
        self._asked_at_end: str | None = None

    def begin(self, *, mode: str, spec: Mapping[str, Any]) -> list[str]:
        """Write the owner record, and keep it touched while this process lives (the
        heartbeat another host reads, :meth:`RunFiles.heartbeat_age`); the warnings
        (none when written)."""
        record = OwnerRecord.new(self.run_id, self.owner, mode=mode,
                                 spec_path=self.spec_path, spec=spec,
                                 progress=self.progress)
        if self.owner is not Owner.AGENT:  # an agent's ask may be its supervisor's
            with contextlib.suppress(OSError):
                self.files.cancel_path(self.run_id).unlink()  # a run id given again
        try:
            self.files.write_owner(record)
        except OSError as exc:
            return [f"could not write this run's owner record "
                    f"{self.files.owner_path(self.run_id)}: {exc}; other shells will not "
                    "find the run"]
        self.record = record
        self._beat()
        return []

    def cancel_asked(self) -> str | None:
        """Who asked to cancel this run before its script ended (the ask as it was
        then: one that came after is not this run's verdict), or None. None for a
        one-shot run: accounting says how its batch job ended."""
        if self.record is not None and self.record.mode == "one-shot":
            return None
        if self._script_ended:
            return self._asked_at_end
        return self.files.cancel_asked(self.run_id)

    def _beat(self, interval_s: float = HEARTBEAT_S) -> None:
        """Touch the owner record every ``interval_s`` until the report is saved, and
        look every :data:`CANCEL_POLL_S` for a cancel asked where this owner could not
        be told (:meth:`RunFiles.cancel_untold`): then stop the run as a signal would
        (:func:`_stop_main`), once, when it runs in the main thread. A daemon thread:
        it ends with the process, which is the point."""
        files, run_id, stop, ending = self.files, self.run_id, self._saved, self._ending
        path = files.owner_path(run_id)
        # a run in another thread (Allocation.submit's pool) is not the main thread's
        # to stop: its ask is still judged
        main = threading.current_thread() is threading.main_thread()

        def beat() -> None:
            touched, stopped = time.monotonic(), not main
            while not stop.wait(interval_s if stopped else min(interval_s, CANCEL_POLL_S)):
                if not stopped and not ending.is_set() and files.cancel_untold(run_id):
                    stopped = _stop_main(ending)
                if time.monotonic() - touched >= interval_s:
                    touched = time.monotonic()
                    with contextlib.suppress(OSError):
                        os.utime(path, follow_symlinks=False)

        threading.Thread(target=beat, name=f"heartbeat-{run_id}", daemon=True).start()

    def held(self, allocation_id: str, lease: str) -> None:
        """A persistent run holds its lease on ``allocation_id`` (its job not started
        yet): the record names both at once, so that the lease's end tells another host
        this owner is gone (:func:`slurm_fsm.detach.settle`), not only its heartbeat."""
        if self.record is None or self.record.phase is not RunPhase.STARTING:
            return
        record = attrs.evolve(self.record, allocation_id=allocation_id, lease=lease)
        with contextlib.suppress(OSError):
            self.files.write_owner(record)
            self.record = record

    def started(self, *, log: str, job_id: str | None, allocation_id: str | None,
                lease: str = "") -> None:
        """The job has started: where its log is, its job or allocation id, the lease
        step that holds it."""
        phase = self._next(RunEvent.STARTED)
        if self.record is None or phase is None:
            return
        record = attrs.evolve(self.record, phase=phase, log=log,
                              job_id=job_id or "", allocation_id=allocation_id or "",
                              lease=lease)
        with contextlib.suppress(OSError):
            self.files.write_owner(record)
            self.record = record

    def script_ended(self, exit_code: int | None) -> None:
        """A persistent run's script has ended with ``exit_code``: a cancel asked from
        now on is not acted on, nor is it this run's verdict."""
        self._asked_at_end = self.files.cancel_asked(self.run_id)
        self._script_ended = True
        self._ending.set()
        phase = self._next(RunEvent.SCRIPT_ENDED)
        if self.record is None or phase is None:
            return
        record = attrs.evolve(self.record, phase=phase, exit_code=exit_code)
        with contextlib.suppress(OSError):
            self.files.write_owner(record)
            self.record = record

    def _next(self, event: RunEvent) -> RunPhase | None:
        """The phase ``event`` moves this run to (:data:`slurm_fsm.runstates.RUN_EDGES`);
        None when there is no record or no such edge: nothing is written."""
        return None if self.record is None else next_phase(self.record.phase, event)

    def save(self, report: Report, source: str = "live") -> str | None:
        """Save the verdict (nothing for a run that never began: a release); a warning
        when it cannot be written."""
        if self.record is None:
            return None
        self._ending.set()
        self._saved.set()
        saved = SavedReport(run_id=self.run_id, report=report, source=source,
                            saved_at=datetime.now(UTC).isoformat(timespec="seconds"),
                            spec_path=self.spec_path)
        try:
            self.files.save_report(saved)
        except OSError as exc:
            return (f"could not save this run's report "
                    f"{self.files.report_path(self.run_id)}: {exc}")
        if (done := self._next(RunEvent.JUDGED)) is not None:
            self.record = attrs.evolve(self.record, phase=done)  # judged stays judged
        return None


class OnStarted(Events):
    """Passes every event on to ``inner``; calls ``started`` when the job starts (the
    RUNNING state of a persistent run, MONITORING of a one-shot job)."""

    STARTED = frozenset({"Running", "Monitoring"})

    def __init__(self, inner: Events, started: Callable[[], None]) -> None:
        self._inner = inner
        self._started = started

    def state(self, machine_state: str, detail: str = "") -> None:
        self._inner.state(machine_state, detail)
        if machine_state in self.STARTED:
            self._started()

    def message(self, text: str) -> None:
        self._inner.message(text)

    def output(self, text: str) -> None:
        self._inner.output(text)

    def job_state(self, slurm_state: str) -> None:
        self._inner.job_state(slurm_state)

    def tick(self, elapsed_s: float, last_line: str) -> None:
        self._inner.tick(elapsed_s, last_line)

    def __getattr__(self, name: str) -> Any:  # a sink's own methods (close, ...)
        return getattr(self._inner, name)
