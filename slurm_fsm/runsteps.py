"""The steps one persistent run starts in its allocation, and their end.

Several runs share one allocation, and the user may run steps of their own in it
(``srun --jobid ... --overlap``): each run stops only its own steps. Which steps are a
run's is decided in one place, :func:`steps_of` (pure: table-tested without a cluster),
used by the run itself (:meth:`RunSteps.ours`), by the next run after a death
(:func:`stop_leftovers`) and by ``status`` (:func:`running_jobs`). A step is a run's
when it is a numbered step of the run's allocation, owned by this unix user, and

* Slurm says its ``srun`` runs on the run's host with a pid of the run's script group
  (``scontrol show step``: ``SrunHost:Pid``; the pids sampled from ``/proc`` while the
  script runs and written into the run record) or of a process the script detached
  from its group (``setsid nohup srun ... &``: it holds the guard's secret token in its
  environment, :func:`slurm_fsm.scriptguard.strays_of`), it started no earlier than the
  run, and that pid is not now a live process outside those (a pid reused); or
* it is a step the run recorded (:class:`~slurm_fsm.runrecord.StepMark`) and Slurm
  still describes it the same way: id, name, srun host and pid, start time; or
* the script itself is that step (a backend that runs the script as a step: the fake).

Nothing else, ever: not "every step when no other run holds a lease", not an id a
record names without Slurm describing the same step, not a step of another allocation
than the one step 0 has just proven this checkout's.

A step never outlives its run (:meth:`RunSteps.finish`): when the script has ended,
for whatever reason (exited with ``srun ... &`` still running, its bash or its guard
killed), whatever is left of its process group and whatever it detached from the
group (issue 43 item 7) is listed, its steps are written into the run record, those
processes are stopped, the steps are cancelled by id and waited for;
the record is deleted only once they are gone. When Slurm cannot be reached the
record stays, listing them, and the next run finishes the job
(:func:`stop_leftovers`).

While the script runs, the step of each of its ``srun`` s that has run
:data:`~slurm_fsm.scriptguard.SRUN_SETTLE_S` (half a second) is looked up once (at most
every :data:`MARK_EVERY_S` while one has none yet) and its id noted in the record's
``seen_steps``: after a non-zero exit the run asks accounting how those steps ended
(:meth:`RunSteps.own_step_ids`, :mod:`slurm_fsm.persistent`). A seen id is never a
step to stop: only the marks are.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime

import attrs

from slurm_fsm import scriptguard
from slurm_fsm.backend import RunningScript, SlurmBackend, StepInfo
from slurm_fsm.clock import Clock
from slurm_fsm.errors import BackendError, JobNotFound
from slurm_fsm.lease import lease_steps
from slurm_fsm.monitor import Watch
from slurm_fsm.runrecord import RunBook, RunRecord, StepMark

__all__ = ["RunSteps", "running_jobs", "steps_of", "stop_leftovers"]

#: How long a cancelled step may take to leave Slurm's list (KillWait and more).
GONE_WAIT_S = 60.0
SAMPLE_EVERY_S = 0.5
#: While an ``srun`` of the script has no step marked yet, Slurm is asked about the
#: allocation's steps at most this often (its step is marked once seen, so that
#: accounting can be asked how it ended: :meth:`RunSteps.own_step_ids`).
MARK_EVERY_S = 2.0
#: The watch's readers of the allocation's steps (the marks, the wait for GPUs) share
#: one answer this young (:meth:`RunSteps.listed`): one question per period, not one
#: per reader.
LISTED_FRESH_S = 2.0
#: Slurm's clock (``StartTime``) and this host's (the record's ``since``) may differ by
#: this much: a step that started earlier than that before the run is not the run's.
CLOCK_SLOP_S = 120.0


def _numbered(steps: Iterable[StepInfo]) -> list[StepInfo]:
    return [s for s in steps if s.step_id.split("+")[0].isdigit()]


def _epoch(text: str, *, local: bool) -> float | None:
    """Seconds since the epoch of an ISO time; a naive one (Slurm's) is local time."""
    try:
        when = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None and not local:
        return None
    return when.timestamp()


def _started_before(step: StepInfo, record: RunRecord) -> bool:
    """Slurm says ``step`` started before ``record``'s run (by more than the slop)."""
    began, since = _epoch(step.start_time, local=True), _epoch(record.since, local=False)
    return began is not None and since is not None and began < since - CLOCK_SLOP_S


def steps_of(record: RunRecord, steps: Iterable[StepInfo], *, host: str, uid: int,
             pids: Collection[int] = (), members: Collection[int] = (),
             alive: Collection[int] = (), host_gone: bool = False) -> list[StepInfo]:
    """The steps among ``steps`` (what Slurm says now) that ``record``'s run started:
    the one rule of the module's text. Pure: it asks neither Slurm nor ``/proc``.

    ``host``: this host; ``uid``: this unix user; ``pids``: the run's script group,
    every pid known (sampled, recorded, live); ``members``: the group's live members
    now (proven the run's); ``alive``: which of the steps' srun pids run on this host
    now (an srun pid alive but not in ``members`` is a reused pid, someone else's).
    ``host_gone``: the record is another host's, and that host is gone (its lease step
    ended with it): its steps are told by their srun's host and pid, the record's."""
    script = record.script
    script_step = (str(script.get("fake_step")) if "fake_step" in script
                   and str(script.get("fake_job")) == record.allocation else None)
    marks = {m.step_id: m for m in record.steps}
    pids, members, alive = set(pids), set(members), set(alive)
    out: list[StepInfo] = []
    for step in _numbered(steps):
        if step.job_id != record.allocation:
            continue
        if step.user_id is not None and (step.user_id != uid or record.uid != uid):
            continue
        mark = marks.get(step.step_id)
        marked = mark is not None and mark.matches(step)
        pid = step.srun_pid
        here = record.host == host and not (pid in alive and pid not in members)
        there = host_gone and record.host != host  # nothing runs there any more
        by_srun = (pid is not None and bool(step.srun_host) and step.srun_host == record.host
                   and (here or there) and pid in pids  # not a reused pid (here)
                   and not _started_before(step, record))
        is_script = script_step is not None and step.step_id == script_step and pid is None
        if marked or by_srun or is_script:
            out.append(step)
    return out


def _alive(steps: Iterable[StepInfo], host: str) -> set[int]:
    """The srun pids of ``steps`` (on this host) that are live processes now."""
    return {s.srun_pid for s in steps if s.srun_pid is not None and s.srun_host == host
            and scriptguard.live_start_ticks(s.srun_pid) is not None}


def _cancel(backend: SlurmBackend, job_id: str, step_ids: list[str],
            problems: list[str]) -> list[str]:
    """scancel each step by id; the ids cancelled (a gone step counts as cancelled)."""
    done = []
    for step in step_ids:
        try:
            backend.cancel(job_id, step)
        except JobNotFound:
            pass
        except BackendError as exc:
            problems.append(f"could not cancel step {job_id}.{step}: {exc}")
            continue
        done.append(step)
    return done


def _wait_gone(backend: SlurmBackend, job_id: str, step_ids: list[str], clock: Clock,
               wait_s: float, problems: list[str]) -> list[str]:
    """The ids of ``step_ids`` still on the allocation after at most ``wait_s``."""
    left = list(step_ids)
    deadline = clock.now() + wait_s
    while left:
        try:
            present = {s.step_id for s in backend.step_details(job_id)}
        except JobNotFound:
            return []  # the allocation itself is gone, and its steps with it
        except BackendError as exc:
            problems.append(f"could not check that the steps of {job_id} ended: {exc}")
            return left
        left = [s for s in left if s in present]
        if not left or clock.now() >= deadline:
            break
        clock.sleep(0.25)
    return left


class RunSteps:
    """One run's steps on ``record.allocation`` (see the module's text)."""

    def __init__(self, backend: SlurmBackend, book: RunBook, record: RunRecord, *,
                 clock: Clock, say: Callable[[str], None] | None = None,
                 gone_wait_s: float = GONE_WAIT_S) -> None:
        self.backend = backend
        self.book = book
        self.record = record
        self.clock = clock
        self.say = say or (lambda _m: None)
        self.gone_wait_s = gone_wait_s
        self.pgid: int | None = None
        self.script: RunningScript | None = None
        self.finished = False
        self.cancelled: set[str] = set()  # by :meth:`stop`, already
        self.unsure = False  # Slurm could not list the steps once: the record stays
        self.pids: set[int] = set()
        self._last_sample = float("-inf")
        self._marked_sruns: set[int] = set()  # srun pids whose step was seen
        #: the srun pids already written into the record: when a sample first saw each
        self._srun_seen: dict[int, float] = {}
        self._last_mark = float("-inf")
        self._listed: tuple[float, list[StepInfo]] | None = None

    @property
    def job_id(self) -> str:
        return self.record.allocation

    def starting(self, token: str) -> None:
        """The script is about to start with its guard's secret ``token``: the record
        names it first, so that whatever holds the token can be proven this run's
        whenever the run dies from now on (before, a run killed as its script started
        left a record that named nothing, and what the script had detached ran on)."""
        self.save(script={"token": token, "host": socket.gethostname(),
                          "boot_id": scriptguard.boot_id()})

    def started(self, script: RunningScript, log: str) -> None:
        """The script runs: its group and its guard's token go into the record."""
        self.script = script
        # its first sample a sample period on: just started, the group is its guard
        # (bash has no srun yet), and a /proc scan would cost each tiny job (issue 28)
        self._last_sample = self.clock.now()
        identity = script.identity
        pgid = identity.get("pgid")
        self.pgid = pgid if isinstance(pgid, int) else None
        self.save(script=identity, log=log)

    def save(self, **changes: object) -> None:
        """Update the record on disk (best effort: the script is tied to this process
        anyway; a record that cannot be written is reported by the caller's checks)."""
        self.record = attrs.evolve(self.record, **changes)  # type: ignore[arg-type]
        try:
            self.book.save(self.record)
        except OSError as exc:
            self.say(f"WARNING: could not update the run record: {exc}")

    def sample(self) -> None:
        """Remember the pids of the script's group (an ``srun`` among them), at most
        every :data:`SAMPLE_EVERY_S`; reads ``/proc`` only. A new ``srun`` goes into the
        record at once: a run killed with ``kill -9`` leaves the pids that prove its
        steps (:func:`steps_of`)."""
        now = self.clock.now()
        if self.pgid is None or now - self._last_sample < SAMPLE_EVERY_S:
            return
        self._last_sample = now
        members = scriptguard.group_members(self.pgid)
        self.pids.update(members)
        sruns = {p for p in members if p not in self._srun_seen and scriptguard.is_srun(p)}
        if sruns:
            self._srun_seen.update(dict.fromkeys(sruns, now))
            # srun's own helper (its child, also named srun) has no step: never asked
            # about, else Slurm is asked every MARK_EVERY_S while the job runs
            self._marked_sruns.update(p for p in sruns if not scriptguard.is_step_srun(p))
            self.save(srun_pids=tuple(sorted(set(self.record.srun_pids) | self.pids)))
        # an srun is asked about once it has run SRUN_SETTLE_S: a tiny job's is gone first
        unmarked = {p for p in members if p in self._srun_seen and p not in self._marked_sruns
                    and now - self._srun_seen[p] >= scriptguard.SRUN_SETTLE_S}
        if unmarked and now - self._last_mark >= MARK_EVERY_S:
            self._last_mark = now
            self._mark()

    def _mark(self) -> None:
        """Note the steps of the script's live ``srun`` s (one ``scontrol show step``,
        :func:`steps_of`): their ids find accounting's rows of this run's steps after
        they ended. Slurm not answering is no problem here: the next sample asks again,
        and without their ids the exit code decides."""
        asked_about = [self._srun_seen[p] for p in self._srun_seen
                       if p not in self._marked_sruns]
        newer_than = max(asked_about) + scriptguard.SRUN_SETTLE_S if asked_about else None
        try:
            found = self.ours(shared=True, newer_than=newer_than)
        except BackendError:
            return
        self._marked_sruns.update(s.srun_pid for s in found if s.srun_pid is not None)
        new = {s.step_id for s in found} - set(self.record.seen_steps)
        if new:  # beside the marks, not among them: an ended step is nothing to stop
            self.save(seen_steps=tuple(sorted(set(self.record.seen_steps) | new)))

    def own_step_ids(self) -> list[str]:
        """The ids of the steps this run started that it did not cancel itself, for
        accounting's word on how they ended: the marked ones, and the script itself
        when it is a step (the fake)."""
        ids = set(self.record.seen_steps) | set(self.record.step_ids)
        script = self.record.script
        if "fake_step" in script and str(script.get("fake_job")) == self.job_id:
            ids.add(str(script["fake_step"]))
        return sorted((i for i in ids if i not in self.cancelled),
                      key=lambda i: [int(p) for p in i.split("+")])

    def listed(self, newer_than: float | None = None) -> list[StepInfo]:
        """The allocation's steps (``scontrol show step``) as Slurm listed them at most
        :data:`LISTED_FRESH_S` ago, and not before ``newer_than`` (this run's clock:
        a reader asking about an ``srun`` needs an answer taken once that srun had run
        SRUN_SETTLE_S): the one answer the watch's readers share while the script runs
        (its steps' marks, :class:`~slurm_fsm.placement.PendingSteps`), so an ``srun``
        costs one question per period, whoever asks first. An allocation gone lists no
        step. Stopping a run's steps asks afresh (:meth:`ours`)."""
        now = self.clock.now()
        if (self._listed is None or now - self._listed[0] >= LISTED_FRESH_S
                or (newer_than is not None and self._listed[0] < newer_than)):
            try:
                steps = self.backend.step_details(self.job_id)
            except JobNotFound:
                steps = []  # the allocation is gone, and its steps with it
            self._listed = (now, steps)
        return self._listed[1]

    def ours(self, strays: Collection[int] = (), *, shared: bool = False,
             newer_than: float | None = None) -> list[StepInfo]:
        """This run's steps now on the allocation (one ``scontrol show step``; with
        ``shared``, the watch's shared answer taken not before ``newer_than``,
        :meth:`listed`), by :func:`steps_of`.
        ``strays``: what the script detached from its group
        (:func:`slurm_fsm.scriptguard.strays_of`), proven the run's by its token like the
        group's members."""
        members = (scriptguard.group_members(self.pgid) if self.pgid is not None else [])
        members += [p for p in strays if p not in members]
        self.pids.update(members)
        if not shared:
            self._listed = None  # asked afresh below: the shared answer is stale now
        steps = self.listed(newer_than)
        host = socket.gethostname()
        return steps_of(self.record, steps, host=host, uid=os.getuid(),
                        pids=self.pids | set(self.record.srun_pids), members=members,
                        alive=_alive(steps, host))

    def _marks(self, found: Iterable[StepInfo]) -> tuple[StepMark, ...]:
        """The record's marks and those of ``found`` (one per step id)."""
        marks = {m.step_id: m for m in self.record.steps}
        marks.update((s.step_id, StepMark.of(s)) for s in found)
        return tuple(marks[k] for k in sorted(marks))

    def stop(self, watch: Watch) -> None:
        """Cancel this run's steps (a hang, the monitor's timeout, an interrupt): for
        :func:`slurm_fsm.monitor.watch_script`. Never another run's step, never the
        allocation. What could not be cancelled is said in ``watch.messages``. The
        steps of what the script detached from its group too (its token)."""
        try:
            found = self.ours(scriptguard.strays_of(self.record.script))
        except BackendError as exc:
            self.unsure = True
            self.save(srun_pids=tuple(sorted(self.pids | set(self.record.srun_pids))))
            watch.messages.append(f"could not list the steps of {self.job_id}: {exc}; "
                                  "the run record is kept for the next run")
            watch.uncancelled_steps.append("its steps (Slurm did not answer)")
            return
        steps = [s.step_id for s in found]
        self.save(steps=self._marks(found))
        problems: list[str] = []
        done = _cancel(self.backend, self.job_id, steps, problems)
        self.cancelled.update(done)
        watch.messages.extend(problems)
        watch.cancelled_steps.extend(f"{self.job_id}.{s}" for s in done)
        watch.uncancelled_steps.extend(f"{self.job_id}.{s}" for s in steps if s not in done)

    def _stop_script(self, script: RunningScript, problems: list[str],
                     notes: list[str]) -> set[str]:
        """What the ended script left running: its group's live members, and what it
        detached from the group (``setsid``, ``nohup``: its token,
        :func:`slurm_fsm.scriptguard.strays_of`, issue 43 item 7). Their steps are
        listed and written into the record, then the processes stopped (``srun`` ends
        its step). The ids of those steps; what was detached is said in ``notes``."""
        members = scriptguard.group_members(self.pgid) if self.pgid is not None else []
        strays = scriptguard.strays_of(self.record.script)
        if not members and not strays:
            return set()
        found: list[StepInfo] = []
        try:
            found = self.ours(strays)
        except BackendError as exc:
            self.unsure = True
            problems.append(f"could not list the steps of {self.job_id}: {exc}")
        listed = {s.step_id for s in found}
        self.save(steps=self._marks(found), ended=True,
                  srun_pids=tuple(sorted(self.pids | set(members) | set(strays)
                                         | set(self.record.srun_pids))))
        self.say(f"the script ended with {len(members) + len(strays)} process(es) of its "
                 f"own still running (steps: {', '.join(sorted(listed)) or 'none'}): "
                 "stopping them")
        if strays:
            notes.append(_detached_text(strays))
        script.terminate()
        return listed

    def finish(self) -> list[str]:
        """After the script has ended (or never started): stop what is left of its
        group, what it detached from it, and every step it started; delete the record
        once they are gone, else keep it for the next run. What was done and the
        problems, as warnings."""
        self.finished = True
        problems: list[str] = []
        notes: list[str] = []
        listed = set(self.record.step_ids)
        if self.script is not None:
            listed |= self._stop_script(self.script, problems, notes)
        by_stop = set(self.cancelled)
        if listed:
            done = _cancel(self.backend, self.job_id, sorted(listed - self.cancelled),
                           problems) + sorted(listed & self.cancelled)
            self.cancelled.update(done)
            left = _wait_gone(self.backend, self.job_id, done, self.clock,
                              self.gone_wait_s, problems)
            left += [s for s in listed if s not in done]
            if left:
                self.save(steps=tuple(m for m in self.record.steps if m.step_id in left),
                          ended=True)
                problems.append(
                    f"step(s) {', '.join(f'{self.job_id}.{s}' for s in sorted(left))} of "
                    f"this run may still run; the run record {self.book.path(self.record.run_id)}"
                    " is kept: the next run on this repo_root stops them")
                return notes + problems
            if listed - by_stop and not problems:
                problems.append("stopped what the script left running: " + ", ".join(
                    f"step {self.job_id}.{s}" for s in sorted(listed - by_stop)))
        if self.unsure:
            self.save(ended=True)
            problems.append(
                f"Slurm could not say which steps of allocation {self.job_id} this run's "
                f"script left; the run record {self.book.path(self.record.run_id)} is kept: "
                "the next run on this repo_root stops them")
            return notes + problems
        self.book.delete(self.record)
        return notes + problems


def _detached_text(strays: Mapping[int, int]) -> str:
    return (f"the script detached {len(strays)} process(es) from its group "
            f"({scriptguard.describe(strays)}: "
            "setsid, nohup, a double fork): stopped with the run")


def _dead_runs_steps(backend: SlurmBackend, old: RunRecord, pids: set[int],
                     members: list[int], problems: list[str]) -> list[StepInfo]:
    """The steps of dead run ``old`` on its allocation (:func:`steps_of`), and its lease
    step when Slurm still lists it (its srun killed with its whole group)."""
    alloc_id, host = old.allocation, socket.gethostname()
    try:
        steps = backend.step_details(alloc_id)
    except JobNotFound:
        return []  # the allocation is gone, and its steps with it
    except BackendError as exc:
        problems.append(f"could not list the steps of {alloc_id}: {exc}")
        return []
    # a record of another host that has not ended is dead only once its lease step is
    # gone with that host (RunBook.dead): its srun pids are that host's, and none runs
    found = steps_of(old, steps, host=host, uid=os.getuid(), pids=pids, members=members,
                     alive=_alive(steps, host), host_gone=old.host != host and not old.ended)
    return found + [lease.step for lease in lease_steps(steps)
                    if lease.run_id == old.run_id and lease.step not in found]


def _lease_names(backend: SlurmBackend, alloc_id: str) -> set[str] | None:
    """The names of the steps Slurm lists on ``alloc_id`` (every lease among them:
    ``scontrol show step``, as for the steps themselves); None when it cannot say."""
    try:
        return {s.name for s in backend.step_details(alloc_id)}
    except JobNotFound:
        return set()
    except BackendError:
        return None


def stop_leftovers(backend: SlurmBackend, book: RunBook, alloc_id: str, clock: Clock,
                   *, gone_wait_s: float = GONE_WAIT_S) -> list[str]:
    """Under the state file's lock, before this run takes its lease: stop what runs that
    died left on ``alloc_id`` (the allocation step 0 has just proven this checkout's):
    each script group proven to be that run's guard
    (:func:`slurm_fsm.scriptguard.proven_members`: ours, its token) and each step
    :func:`steps_of` finds the dead run's, nothing else. A record naming another
    allocation acts on nothing in Slurm (its script group, proven ours, is stopped) and
    is deleted. A record is deleted once what it names is gone. What was done, as
    warnings (a skipped file named). No record of a dead run: no Slurm call."""
    out: list[str] = []
    dead = book.dead(leases=lambda alloc: _lease_names(backend, alloc))
    for path, why in sorted(book.skipped.items()):
        out.append(f"run record {path} skipped: {why}; delete it")
    book.skipped.clear()
    host = socket.gethostname()
    for old in dead:
        what: list[str] = []
        problems: list[str] = []
        pgid, token = old.script.get("pgid"), old.script.get("token")
        members = (scriptguard.proven_members(pgid, token)
                   if isinstance(pgid, int) and isinstance(token, str)
                   and old.host == host else [])
        # and what its script detached from the group: its token (issue 43 item 7)
        members += [p for p in scriptguard.strays_of(old.script) if p not in members]
        pids = set(members) | set(old.srun_pids)
        found: list[StepInfo] = []
        if old.allocation != alloc_id:
            out.append(f"run record {book.path(old.run_id)} of an earlier run names "
                       f"allocation {old.allocation}, not {alloc_id} (this checkout's): "
                       "no step of it is touched")
        elif old.steps or pids or "fake_step" in old.script:
            found = _dead_runs_steps(backend, old, pids, members, problems)
        if old.script:  # the backend proves the group ours before it stops anything
            stopped = backend.stop_stale_script(old.script)
            if stopped:
                what.append(f"its script ({stopped})")
        ids = sorted(s.step_id for s in found)
        done = _cancel(backend, alloc_id, ids, problems)
        left = _wait_gone(backend, alloc_id, done, clock, gone_wait_s, problems)
        left += [s for s in ids if s not in done]
        what += [f"step {alloc_id}.{s}" for s in sorted(done) if s not in left]
        if left or problems:
            try:
                book.save(attrs.evolve(old, steps=tuple(
                    StepMark.of(s) for s in found if s.step_id in left) or old.steps))
            except OSError as exc:
                problems.append(f"could not update the run record of that run: {exc}")
        else:
            book.delete(old)
        if what:
            out.append(f"stopped what an earlier run that died left running: {', '.join(what)}"
                       f" (left by an earlier run started {old.since}, log {old.log or '?'})")
        out.extend(problems)
    return out


def running_jobs(backend: SlurmBackend, book: RunBook, alloc_id: str) -> list[dict[str, object]]:
    """The jobs running on ``alloc_id`` (live leases), for ``status``: each with its
    steps (:func:`steps_of`) and the GPUs each holds (one ``scontrol show step`` when
    there is a job)."""
    leases = book.live(alloc_id)
    if not leases:
        return []
    try:
        steps = backend.step_details(alloc_id)
    except BackendError:
        steps = []
    host, uid = socket.gethostname(), os.getuid()
    alive = _alive(steps, host)
    out: list[dict[str, object]] = []
    for rec in leases:
        pgid = rec.script.get("pgid")
        members = (scriptguard.group_members(pgid)
                   if isinstance(pgid, int) and rec.host == host else [])
        mine = steps_of(rec, steps, host=host, uid=uid,
                        pids=set(members) | set(rec.srun_pids), members=members, alive=alive)
        info = rec.public()
        info["steps"] = [{"id": s.full_id, "name": s.name, "nodes": s.nodelist,
                          "gpus": s.gpus, "tres": s.tres} for s in mine]
        out.append(info)
    return out
