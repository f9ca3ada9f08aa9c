"""Runs that outlive the shell: start a run detached, find it again, follow it, settle it.

Every run has a run id, an owner record and, once judged, a saved report beside the
state file (:mod:`slurm_fsm.runowner`). A detached run is owned by a supervisor
(:mod:`slurm_fsm.supervise`) instead of the process that asked for it. From any shell
of a login node that shares the checkout:

* :func:`submit` starts a run detached and returns once its job has started (or it
  ended before: a failed step 0);
* :func:`attach` gives a :class:`DetachedRun` for a run id; :func:`runs` lists the
  checkout's runs, newest first;
* :meth:`DetachedRun.result` waits for the verdict; when the owner is gone without one,
  :func:`settle` makes it from what the run left, through the same judge
  (:func:`slurm_fsm.results.report_of`), saved with ``source: rebuilt`` and a note
  saying why.

Nothing here blocks on Slurm to answer "what is this run doing": the files say it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from slurm_fsm.backend import SlurmBackend
from slurm_fsm.errors import SlurmFsmError, SpecError, UnknownRun
from slurm_fsm.events import Events
from slurm_fsm.paths import StatePaths
from slurm_fsm.report import Report
from slurm_fsm.runlog import RunState, state_of
from slurm_fsm.runowner import (
    CANCEL_POLL_S,
    HEARTBEAT_STALE_S,
    OwnedRun,
    Owner,
    OwnerRecord,
    RunFiles,
    RunPhase,
    SavedReport,
    is_run_id,
    owner_alive,
)
from slurm_fsm.runrecord import new_run_id

if TYPE_CHECKING:  # the spec is loaded when a run is started or rebuilt, not to list runs
    from slurm_fsm.spec import JobSpec

__all__ = ["LEASE_GONE_GRACE_S", "DetachedRun", "RunState", "RunView", "UnknownRun", "attach",
           "backend_for", "find", "follow", "run_files", "runs", "settle", "submit"]

#: How often a follower looks at a run's files again.
POLL_S = 0.2


def run_files(repo: Path) -> list[RunFiles]:
    """The run files of a checkout: those of its real state file, then of the fake
    backend's (``--backend fake``)."""
    return [RunFiles(StatePaths.for_repo(repo, fake=fake).state) for fake in (False, True)]


@attrs.frozen(kw_only=True)
class RunView:
    """One run as its files show it."""

    run_id: str
    files: RunFiles
    record: OwnerRecord | None
    saved: SavedReport | None

    @property
    def state(self) -> str:
        rec = self.record  # the rule of slurm_fsm.runlog (logs' fast path) too
        return state_of(saved=self.saved is not None, has_owner=rec is not None,
                        owner_alive=owner_alive(rec) if rec is not None and self.saved is None
                        else None, phase=rec.phase.value if rec is not None else "")

    @property
    def log(self) -> Path | None:
        """The job's log once it has started; a detached run's progress before."""
        rec = self.record
        if rec is not None and rec.log:
            return Path(rec.log)
        if self.saved is not None and self.saved.report.log_files.get("stdout"):
            return Path(str(self.saved.report.log_files["stdout"]))
        return Path(rec.progress) if rec is not None and rec.progress else None

    def to_dict(self) -> dict[str, object]:
        rec, report = self.record, self.saved.report if self.saved else None
        return {"run_id": self.run_id, "state": self.state,
                "spec": rec.spec_path if rec else (self.saved.spec_path if self.saved else ""),
                "mode": rec.mode if rec else (report.mode if report else ""),
                "owner": rec.owner.value if rec else "",
                "host": rec.host if rec else "", "pid": rec.pid if rec else None,
                "started": rec.since if rec else "",
                "allocation_id": (rec.allocation_id if rec else "") or
                (report.allocation_id if report else "") or "",
                "job_id": (rec.job_id if rec else "") or (report.job_id if report else "")
                or "",
                "log": str(self.log or ""),
                "progress": rec.progress if rec else "",
                "status": report.status.name if report else None,
                "exit_code": report.exit_code_for_cli if report else None,
                "report_source": self.saved.source if self.saved else None}


def find(repo: Path, run_id: str) -> RunView:
    """The run ``run_id`` of the checkout ``repo``; :class:`UnknownRun` when there is
    none (or the id is not one)."""
    if not is_run_id(run_id):
        raise UnknownRun(f"{run_id!r} is not a run id (r and 12 hex digits, as `slurm-fsm "
                         "runs` prints them)")
    for files in run_files(repo):
        record, saved = files.owner(run_id), files.report(run_id)
        if record is not None or saved is not None:
            return RunView(run_id=run_id, files=files, record=record, saved=saved)
    bad = [why for files in run_files(repo) if (why := files.owner_problem(run_id))]
    raise UnknownRun(f"no run {run_id} in {Path(repo) / 'work_dirs'} (`slurm-fsm runs` "
                     "lists this checkout's runs)"
                     + "".join(f"; its owner record {why}" for why in bad))


def runs(repo: Path) -> list[RunView]:
    """The checkout's runs, newest first."""
    found = []
    for files in run_files(repo):
        for record in files.owners():
            found.append(RunView(run_id=record.run_id, files=files, record=record,
                                 saved=files.report(record.run_id)))
    return sorted(found, key=lambda v: (v.record.since if v.record else "", v.run_id),
                  reverse=True)


# ------------------------------------------------------------------- settling
#: How long a run on another host may take between the end of its lease step and its
#: saved report before it counts as gone (its owner stops the lease, then judges).
LEASE_GONE_GRACE_S = 10.0


def _spec_of(rec: OwnerRecord) -> JobSpec | None:
    try:
        from slurm_fsm.spec import JobSpec  # a rebuild's only: report and runs need none

        return JobSpec.from_dict(rec.spec, check_script=False) if rec.spec else None
    except SlurmFsmError:
        return None


def _interrupted(view: RunView, why: str) -> Report:
    """The verdict of a persistent run whose owner is gone: its script was stopped with
    it (a run's script never outlives its owner), so it ended then."""
    from slurm_fsm.logs import tail_lines
    from slurm_fsm.results import report_of
    from slurm_fsm.runfacts import Mode, Phase, RunFacts

    rec = view.record
    assert rec is not None
    log = Path(rec.log) if rec.log else None
    spec = _spec_of(rec)
    asked = view.files.cancel_asked_before(rec.run_id)  # not one after the script's end
    if rec.phase is RunPhase.ENDED and log is not None and spec is not None:
        return _ended_script(rec, spec, log, why, asked)
    code = view.files.script_status(rec.run_id) if rec.mode != "one-shot" else None
    if code is not None and log is not None and spec is not None:
        # the script ended by itself before its owner noticed: its guard wrote its status
        return _ended_script(attrs.evolve(rec, exit_code=code), spec, log,
                             f"{why} (its script had ended, exit code {code} as its "
                             "guard wrote it)", asked)
    facts = RunFacts(
        mode=Mode(rec.mode), phase=Phase.RUNNING if log else Phase.STEP0,
        interrupted=why, job_id=rec.job_id or None, allocation_id=rec.allocation_id or None,
        stdout=str(log) if log else None,
        log_tail=tuple(tail_lines(log, 50)) if log is not None else (),
        notes=(_note(why, "the job's script was stopped with it (a run's script never "
                          "outlives its owner)"),))
    return report_of(facts, _spec_of(rec))


def _ended_script(rec: OwnerRecord, spec: JobSpec, log: Path, why: str,
                  asked: str | None) -> Report:
    """The verdict of a persistent run whose script had ended (its exit code recorded)
    when its owner died: judged from that exit code and the whole log, as its owner
    would have (without accounting's word on its steps; with the cancel ``asked``)."""
    from slurm_fsm.joboutput import output_for_spec
    from slurm_fsm.results import report_of
    from slurm_fsm.runfacts import Mode, Phase, RunFacts

    output = output_for_spec(spec, [log])
    output.finish()
    facts = RunFacts(mode=Mode(rec.mode), phase=Phase.COLLECTED, exit_code=rec.exit_code,
                     allocation_id=rec.allocation_id or None, output=output.snapshot(),
                     stdout=str(log), cancel_asked=asked,
                     notes=(_note(why, f"its script had ended (exit code {rec.exit_code}) "
                                       "and is judged from that and its log"),))
    return report_of(facts, spec)


def _note(why: str, then: str) -> str:
    return f"rebuilt by pid {os.getpid()} on {os.uname().nodename}: {why}; {then}"


def _batch_job(view: RunView, backend: SlurmBackend, why: str) -> Report | None:
    """The verdict of a one-shot run whose owner is gone: its batch job outlives it;
    None while the job still runs, else the job judged as its owner would have
    (:meth:`slurm_fsm.oneshot.OneShotRun.collect`)."""
    from slurm_fsm.errors import BackendError, JobNotFound
    from slurm_fsm.monitor import PollPolicy
    from slurm_fsm.oneshot import OneShotRun
    from slurm_fsm.results import report_of

    rec = view.record
    spec = _spec_of(rec) if rec is not None else None
    if rec is None or spec is None or not rec.job_id:
        return None
    try:
        if backend.query_job(rec.job_id).state.is_live:
            return None
    except JobNotFound:
        pass
    except BackendError:
        return None
    run = OneShotRun(spec, backend, clock=backend.clock, events=Events(),
                     policy=PollPolicy(), warnings=[])
    facts = run.collect(rec.job_id)
    facts = attrs.evolve(facts, notes=(*facts.notes, _note(why, f"its batch job "
                                                           f"{rec.job_id} was followed "
                                                           "to its end")))
    return report_of(facts, spec)


def _lease_gone(view: RunView, rec: OwnerRecord, backend: SlurmBackend) -> bool:
    """Slurm no longer lists the step that holds ``rec``'s run: its lease step, or, once
    that is gone, its agent step (``fsm-agent.<run id>``: a supervisor's lease ends as
    its agent takes the run; while the agent's step runs, the agent may hold it), nor
    its allocation: its owner, on another host, is gone (a lease ends with its host).
    Or the holding step is listed with no task that ever ran (issue 39 (b): its host
    died between the step's creation and the task's launch, and the step lives until the
    allocation ends) while its owner is silent (:func:`_heartbeat_stopped`): that step
    is cancelled here, the step alone. False when Slurm cannot say, or the record names
    no lease; a silent owner whose step's task runs is a paused one, never gone."""
    from slurm_fsm.errors import BackendError, JobNotFound
    from slurm_fsm.slurmcli import AGENT_STEP_PREFIX

    if not rec.lease:
        return False
    try:
        listed = {s.name: s.step_id for s in backend.list_steps(rec.allocation_id)}
    except JobNotFound:
        return True
    except BackendError:
        return False
    holder = next((listed[n] for n in (rec.lease, AGENT_STEP_PREFIX + rec.run_id)
                   if n in listed), None)
    if holder is None:
        return True
    if not _heartbeat_stopped(view):
        return False
    return _taskless_cancelled(backend, rec.allocation_id, [holder]) == [holder]


def _taskless_cancelled(backend: SlurmBackend, allocation_id: str,
                        step_ids: list[str]) -> list[str]:
    """Of ``step_ids`` (steps of ``allocation_id``), those no task of which runs
    (``sstat``: :class:`~slurm_fsm.backend.TaskLister`), each cancelled, the step
    alone. None of them without a TaskLister (a backend that cannot tell never breaks
    a step for its owner's silence alone), nor when Slurm cannot say."""
    from slurm_fsm.backend import TaskLister
    from slurm_fsm.errors import BackendError

    if not isinstance(backend, TaskLister):
        return []
    try:
        running = set(backend.steps_with_tasks(allocation_id))
        idle = [s for s in step_ids if s not in running]
        for step in idle:
            backend.cancel(allocation_id, step)  # the step only
    except BackendError:
        return []
    return idle


def _stop_named_steps(view: RunView, backend: SlurmBackend | None) -> str:
    """The steps named for a run settled in step 0 on the checkout's allocation (its
    lease step or agent step, made by slurmctld as its host died before the record
    named them; Slurm keeps such a step, whose task never ran, until the allocation
    ends), cancelled when no task of theirs runs (:func:`_taskless_cancelled`): the
    steps alone. A step whose task runs is left (its owner may be paused). A run id is
    48 random bits: a step named for it is its. What was done, in words."""
    from slurm_fsm.errors import BackendError, StateFileError
    from slurm_fsm.lease import LEASE_PREFIX
    from slurm_fsm.slurmcli import AGENT_STEP_PREFIX
    from slurm_fsm.state import StateStore

    if backend is None:
        return ""
    try:
        alloc = StateStore(view.files.paths.state).read()
    except (StateFileError, OSError):
        return ""
    if alloc is None:
        return ""
    names = (f"{LEASE_PREFIX}.{view.run_id}.", AGENT_STEP_PREFIX + view.run_id)
    try:
        named = {s.step_id: s.name for s in backend.list_steps(alloc.job_id)
                 if s.name.startswith(names)}
    except BackendError as exc:
        return f"; its steps on allocation {alloc.job_id} not looked for: {exc}"
    cancelled = _taskless_cancelled(backend, alloc.job_id, sorted(named))
    return "".join(
        f"; its step {alloc.job_id}.{sid} ({name}) "
        + ("cancelled" if sid in cancelled else "left: its task runs, or Slurm could "
           "not say")
        for sid, name in sorted(named.items()))


def _heartbeat_stopped(view: RunView) -> bool:
    """The run's owner has not touched its record for :data:`HEARTBEAT_STALE_S`: it is
    gone (read where no lease step can tell: an owner on another host before its job
    started, in step 0 or ``sbatch``)."""
    age = view.files.heartbeat_age(view.run_id)
    return age is not None and age > HEARTBEAT_STALE_S


def _stop_what_it_left(view: RunView, backend: SlurmBackend) -> str:
    """Stop the steps a run whose host is gone left on its allocation, as the next run
    would (:func:`slurm_fsm.runsteps.stop_leftovers`, under the state file's lock):
    a run is reported when none of its steps runs any more. What was done, in words."""
    from slurm_fsm.runrecord import RunBook
    from slurm_fsm.runsteps import stop_leftovers
    from slurm_fsm.state import StateStore

    rec = view.record
    assert rec is not None
    state = view.files.paths.state
    try:
        with StateStore(state, lock_timeout_s=60.0).locked():
            said = stop_leftovers(backend, RunBook(state), rec.allocation_id, backend.clock)
    except (SlurmFsmError, OSError) as exc:
        return f"; what it left could not be stopped: {exc}"
    return "".join(f"; {text}" for text in said)


def settle(view: RunView, backend: SlurmBackend | None = None) -> SavedReport | None:
    """The run's verdict: the saved one; else, when its owner is gone, one rebuilt from
    what it left and saved (``source: rebuilt``); else None (it still runs).

    An owner on this host is gone when its pid (with its start time) is. An owner on
    another host cannot be checked from here: with ``backend``, Slurm tells (a
    persistent run's lease step ends with its host; a one-shot job ends by itself).
    A persistent run's script stops with its owner: it is judged as stopped then. A
    one-shot job goes on: it is judged once it has ended, as its owner would have."""
    if view.saved is not None:
        return view.saved
    rec = view.record
    if rec is None or rec.phase is RunPhase.DONE:
        return None
    alive = owner_alive(rec)
    if alive:
        return None
    # an owner saves its report before it ends: one read after its end is not missed
    if (saved := view.files.report(rec.run_id)) is not None:
        return saved
    why = f"its {rec.owner.value} (pid {rec.pid} on {rec.host}) is gone without a report"
    report: Report | None = None
    if rec.mode == "one-shot" and backend is not None and rec.job_id:
        report = _batch_job(view, backend, why)
    elif alive is False:  # a fake cluster's job died with the process that held it
        report = _interrupted(view, why)
    elif alive is None and not rec.lease and _heartbeat_stopped(view):
        # another host's owner that held no lease yet (step 0; sbatch): its heartbeat
        age = view.files.heartbeat_age(rec.run_id) or 0.0
        stopped = _stop_named_steps(view, backend) if rec.mode != "one-shot" else ""
        report = _interrupted(view, why.replace("is gone", f"is gone (its heartbeat "
                                                f"stopped {age:.0f} s ago)") + stopped)
    elif (rec.mode != "one-shot" and backend is not None and rec.allocation_id
          and _lease_gone(view, rec, backend)):
        time.sleep(LEASE_GONE_GRACE_S)  # it may be judging now: its report comes first
        if (saved := view.files.report(rec.run_id)) is not None:
            return saved
        stopped = _stop_what_it_left(view, backend)
        gone = "is gone (its lease step ended with its host, or never ran a task)"
        report = _interrupted(view, why.replace("is gone", gone) + stopped)
    if report is None:
        return None
    owned = OwnedRun(view.files, rec.run_id, rec.owner, spec_path=rec.spec_path)
    owned.record = rec
    owned.save(report, source="rebuilt")
    return view.files.report(rec.run_id) or SavedReport(
        run_id=rec.run_id, report=report, source="rebuilt", spec_path=rec.spec_path)


# ------------------------------------------------------------------- following
def follow(path: Path, *, until: Callable[[], bool], offset: int = 0,
           poll_s: float = POLL_S) -> Iterator[bytes]:
    """The bytes of ``path`` from ``offset``, as they are written, until ``until()``
    says so (then what is left is read once more). A file not there yet is waited for.
    Read by offset from an open file (``fstat``), not by polling its size by name."""
    fh = None
    try:
        while True:
            done = until()
            if fh is None:
                try:
                    fh = open(path, "rb")  # noqa: SIM115 - kept open across polls
                    fh.seek(offset)
                except OSError:
                    fh = None
            if fh is not None:
                while chunk := fh.read(65536):
                    yield chunk
            if done:
                return
            time.sleep(poll_s)
    finally:
        if fh is not None:
            fh.close()


def backend_for(files: RunFiles) -> SlurmBackend | None:
    """The backend that can tell how a run of ``files`` went: this machine's Slurm for
    a real state file; None for the fake backend's (its cluster lived in the process
    that ran it)."""
    if files.paths.state.name == StatePaths.for_repo(".", fake=True).state.name:
        return None
    from slurm_fsm.subprocess_backend import SubprocessBackend

    return SubprocessBackend()


class DetachedRun:
    """A run found by its id (:func:`attach`) or started detached (:func:`submit`)."""

    def __init__(self, repo: Path, run_id: str) -> None:
        self.repo = Path(repo)
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"DetachedRun({self.run_id!r}, repo={str(self.repo)!r})"

    def view(self) -> RunView:
        return find(self.repo, self.run_id)

    def state(self) -> str:
        return self.view().state

    def done(self) -> bool:
        return self.view().state in (RunState.DONE, RunState.LOST)

    def result(self, timeout: float | None = None) -> Report:
        """The report, once the run is judged (rebuilt when its owner is gone without
        one). TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            view = self.view()
            saved = settle(view, backend_for(view.files))
            if saved is not None:
                return saved.report
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {self.run_id} has no verdict after {timeout} s")
            time.sleep(POLL_S)

    def cancel(self) -> str:
        """Stop the run's job (its steps; the allocation stays). The ask is written
        beside the run first (:meth:`RunFiles.ask_cancel`: whoever judges the run reads
        it), then its owner is told as a foreground run is by Ctrl-C (SIGTERM): here by
        a signal, an agent through Slurm, an owner on another login node by the ask,
        which it looks for every second (a run of the CLI, a supervisor or an agent); a
        one-shot run's batch job is cancelled itself. It saves the CANCELLED report.
        Nothing is asked of a run whose script has ended (its verdict is being made)
        or whose owner is gone (``report`` rebuilds it). What was done, in words."""
        view = self.view()
        rec = view.record
        if view.state == RunState.DONE or rec is None:
            return f"run {self.run_id} has ended already"
        alive = owner_alive(rec)
        if alive is False or (alive is None and _heartbeat_stopped(view)):
            return (f"run {self.run_id}: its {rec.owner.value} is gone already "
                    f"(`slurm-fsm report {self.run_id}` gives its verdict)")
        if rec.phase is RunPhase.ENDED:
            return (f"run {self.run_id}: its script has ended (exit code {rec.exit_code}); "
                    "its verdict is being made")
        batch = rec.mode == "one-shot" and bool(rec.job_id) and not alive
        told = alive is True or rec.owner is Owner.AGENT or batch
        try:
            view.files.ask_cancel(self.run_id, f"slurm-fsm cancel (pid {os.getpid()} on "
                                               f"{os.uname().nodename})", told=told)
        except OSError as exc:
            if not told:  # the ask is the only way to it
                raise SlurmFsmError(f"run {self.run_id} is owned by pid {rec.pid} on "
                                    f"{rec.host}, and the ask could not be written beside "
                                    f"it: {exc}") from exc
            unasked = f" (the ask could not be written beside it: {exc})"
        else:
            unasked = ""
        if not told:
            return (f"run {self.run_id}: asked its {rec.owner.value} (pid {rec.pid} on "
                    f"{rec.host}) to stop: it looks for the ask every {CANCEL_POLL_S:g} s "
                    "once its host sees the file")
        if alive:
            os.kill(rec.pid, signal.SIGTERM)
            return (f"run {self.run_id}: its {rec.owner.value} (pid {rec.pid}) was told to "
                    f"stop{unasked}")
        try:  # through Slurm: from any host
            done = self._cancel_batch(rec) if batch else self._cancel_agent(rec)
        except BaseException:
            view.files.withdraw_cancel(self.run_id)  # nobody was told: no verdict of it
            raise
        return done + unasked

    def _cancel_batch(self, rec: OwnerRecord) -> str:
        """Cancel a one-shot run's batch job (its owner on another host judges it from
        accounting: CANCELLED)."""
        backend = backend_for(self.view().files)
        if backend is None:
            raise SlurmFsmError(f"run {self.run_id}: its batch job cannot be cancelled "
                                "from here")
        backend.cancel(rec.job_id)
        return (f"run {self.run_id}: its batch job {rec.job_id} was cancelled; its "
                f"{rec.owner.value} on {rec.host} saves the report")

    def _cancel_agent(self, rec: OwnerRecord) -> str:
        """Tell a run's agent to stop (SIGTERM to its step, through Slurm: it may run
        on any node): it stops the job's steps and saves the CANCELLED report."""
        from slurm_fsm.backend import AgentLauncher
        from slurm_fsm.slurmcli import AGENT_STEP_PREFIX

        backend = backend_for(self.view().files)
        name = f"{AGENT_STEP_PREFIX}{self.run_id}"
        if not isinstance(backend, AgentLauncher) or not rec.allocation_id:
            raise SlurmFsmError(f"run {self.run_id}: its agent cannot be told from here")
        step = next((s.step_id for s in backend.list_steps(rec.allocation_id)
                     if s.name == name), None)
        if step is None:
            return f"run {self.run_id}: its agent is gone already"
        backend.signal_step(rec.allocation_id, step, "TERM")
        return (f"run {self.run_id}: its agent (step {rec.allocation_id}.{step} on "
                f"{rec.host}) was told to stop")


def attach(run_id: str, repo: str | Path = ".") -> DetachedRun:
    """A handle on run ``run_id`` of the checkout ``repo`` (UnknownRun when none)."""
    handle = DetachedRun(Path(repo).resolve(), run_id)
    handle.view()
    return handle


def submit(spec: JobSpec, *, spec_path: str = "", state_path: Path | None = None,
           backend: str = "slurm", fake_partitions: tuple[str, ...] = (),
           fake_accounts: tuple[str, ...] = (), no_wait: bool = False,
           on_progress: Callable[[bytes], None] | None = None,
           timeout: float | None = None) -> DetachedRun:
    """Start ``spec`` detached: a supervisor owns the run (:mod:`slurm_fsm.supervise`).
    Returns once the job has started (or the run has ended, a failed step 0 included);
    ``on_progress`` gets the supervisor's progress meanwhile. The spec's inputs are
    checked here first (SpecError: nothing started)."""
    from slurm_fsm.scriptcheck import input_problems
    from slurm_fsm.supervise import Task, spawn

    if spec.release_allocation:
        raise SpecError("job spec", ["release_allocation: a release is not a run to "
                                     "detach; use `slurm-fsm release`"])
    if problems := input_problems(spec):
        raise SpecError("job spec", problems)
    if state_path is None:
        state_path = StatePaths.for_repo(spec.repo_root, fake=backend == "fake").state
    run_id = new_run_id()
    task = Task(spec=spec.to_dict(), spec_path=spec_path, backend=backend,
                fake_partitions=fake_partitions, fake_accounts=fake_accounts,
                no_wait=no_wait)
    proc = spawn(task, state_path, run_id)
    handle = DetachedRun(spec.repo_root, run_id)
    files = RunFiles(state_path)

    def started() -> bool:
        rec = files.owner(run_id)
        if (rec is not None and rec.phase is not RunPhase.STARTING) or \
                files.report(run_id) is not None:
            return True
        if proc.poll() is not None:  # gone before it wrote anything more
            return True
        if timeout is not None and time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id}: its job has not started after {timeout} s "
                               "(it goes on: `slurm-fsm attach " + run_id + "`)")
        return False

    deadline = time.monotonic() + (timeout or 0.0)
    for chunk in follow(files.progress_path(run_id), until=started):
        if on_progress is not None:
            on_progress(chunk)
    if files.owner(run_id) is None and files.report(run_id) is None:
        tail = files.progress_path(run_id).read_text(errors="replace")[-2000:]
        raise SlurmFsmError(f"run {run_id}: its supervisor ended (exit {proc.poll()}) "
                            f"before the run began:\n{tail}")
    return handle

