"""The steps one persistent run starts in its allocation, and their end.

Several runs share one allocation; each stops only its own steps. A step is this run's
when Slurm says its ``srun`` runs on this host with a pid of this run's script group
(``scontrol show step``: ``SrunHost:Pid``), the pids being sampled while the script
runs (:meth:`RunSteps.sample`, ``/proc`` only, no Slurm call). Where Slurm gives no
srun pid (the fake cluster), the steps are this run's only when no other run holds a
lease on the allocation.

A step never outlives its run (:meth:`RunSteps.finish`): when the script has ended,
for whatever reason (exited with ``srun ... &`` still running, its bash or its guard
killed), whatever is left of its process group is listed, its steps are written into
the run record, the group is stopped, the steps are cancelled by id and waited for;
the record is deleted only once they are gone. When Slurm cannot be reached the
record stays, listing them, and the next run finishes the job
(:func:`stop_leftovers`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import attrs

from slurm_fsm import scriptguard
from slurm_fsm.backend import RunningScript, SlurmBackend, StepInfo
from slurm_fsm.clock import Clock
from slurm_fsm.errors import BackendError, JobNotFound
from slurm_fsm.monitor import Watch
from slurm_fsm.runrecord import RunBook, RunRecord

__all__ = ["RunSteps", "running_jobs", "stop_leftovers"]

#: How long a cancelled step may take to leave Slurm's list (KillWait and more).
GONE_WAIT_S = 60.0
SAMPLE_EVERY_S = 0.5


def _numbered(steps: list[StepInfo]) -> list[StepInfo]:
    return [s for s in steps if s.step_id.split("+")[0].isdigit()]


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

    @property
    def job_id(self) -> str:
        return self.record.allocation

    def started(self, script: RunningScript, log: str) -> None:
        """The script runs: its group and its guard's token go into the record."""
        self.script = script
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
        every :data:`SAMPLE_EVERY_S`; reads ``/proc`` only."""
        now = self.clock.now()
        if self.pgid is None or now - self._last_sample < SAMPLE_EVERY_S:
            return
        self._last_sample = now
        self.pids.update(scriptguard.group_members(self.pgid))

    def ours(self) -> list[StepInfo]:
        """This run's steps now on the allocation (one ``scontrol show step``)."""
        if self.pgid is not None:
            self.pids.update(scriptguard.group_members(self.pgid))
        try:
            steps = _numbered(self.backend.step_details(self.job_id))
        except JobNotFound:
            return []  # the allocation is gone, and its steps with it
        host = socket.gethostname()
        mine = [s for s in steps if s.srun_pid is not None and s.srun_host == host
                and s.srun_pid in self.pids]
        unknown = [s for s in steps if s.srun_pid is None]
        if unknown and not self._others():
            mine += unknown
        return mine

    def _others(self) -> bool:
        return any(r.run_id != self.record.run_id for r in self.book.live(self.job_id))

    def stop(self, watch: Watch) -> None:
        """Cancel this run's steps (a hang, the monitor's timeout, an interrupt): for
        :func:`slurm_fsm.monitor.watch_script`. Never another run's step, never the
        allocation. What could not be cancelled is said in ``watch.messages``."""
        try:
            steps = [s.step_id for s in self.ours()]
        except BackendError as exc:
            self.unsure = True
            self.save(srun_pids=tuple(sorted(self.pids)))
            watch.messages.append(f"could not list the steps of {self.job_id}: {exc}; "
                                  "the run record is kept for the next run")
            watch.uncancelled_steps.append("its steps (Slurm did not answer)")
            return
        self.save(steps=tuple(sorted(set(self.record.steps) | set(steps))))
        problems: list[str] = []
        done = _cancel(self.backend, self.job_id, steps, problems)
        self.cancelled.update(done)
        watch.messages.extend(problems)
        watch.cancelled_steps.extend(f"{self.job_id}.{s}" for s in done)
        watch.uncancelled_steps.extend(f"{self.job_id}.{s}" for s in steps if s not in done)

    def finish(self) -> list[str]:
        """After the script has ended (or never started): stop what is left of its
        group and every step it started; delete the record once they are gone, else
        keep it for the next run. What was done and the problems, as warnings."""
        self.finished = True
        script = self.script
        problems: list[str] = []
        members = scriptguard.group_members(self.pgid) if self.pgid is not None else []
        listed = set(self.record.steps)
        if members and script is not None:
            try:
                listed |= {s.step_id for s in self.ours()}
            except BackendError as exc:
                self.unsure = True
                problems.append(f"could not list the steps of {self.job_id}: {exc}")
            self.save(steps=tuple(sorted(listed)), ended=True,
                      srun_pids=tuple(sorted(self.pids | set(members))))
            self.say(f"the script ended with {len(members)} process(es) of its own still "
                     f"running (steps: {', '.join(sorted(listed)) or 'none'}): stopping them")
            script.terminate()
        if listed:
            done = _cancel(self.backend, self.job_id, sorted(listed - self.cancelled),
                           problems) + sorted(listed & self.cancelled)
            left = _wait_gone(self.backend, self.job_id, done, self.clock,
                              self.gone_wait_s, problems)
            left += [s for s in listed if s not in done]
            if left:
                self.save(steps=tuple(sorted(left)), ended=True)
                problems.append(
                    f"step(s) {', '.join(f'{self.job_id}.{s}' for s in sorted(left))} of "
                    f"this run may still run; the run record {self.book.path(self.record.run_id)}"
                    " is kept: the next run on this repo_root stops them")
                return problems
            if listed - self.cancelled and not problems:
                problems.append("stopped what the script left running: " + ", ".join(
                    f"step {self.job_id}.{s}" for s in sorted(listed - self.cancelled)))
        if self.unsure:
            self.save(ended=True)
            problems.append(
                f"Slurm could not say which steps of allocation {self.job_id} this run's "
                f"script left; the run record {self.book.path(self.record.run_id)} is kept: "
                "the next run on this repo_root stops them")
            return problems
        self.book.delete(self.record)
        return problems


def stop_leftovers(backend: SlurmBackend, book: RunBook, alloc_id: str, clock: Clock,
                   *, gone_wait_s: float = GONE_WAIT_S) -> list[str]:
    """Under the state file's lock, before this run takes its lease: stop what runs that
    died left (their records name it): each script group proven to be that run's guard
    (:func:`slurm_fsm.scriptguard.proven_members`: ours, its token) and each step the
    record lists. A record is deleted once what it names is gone. What was done, as
    warnings. No record of a dead run: no Slurm call."""
    out: list[str] = []
    for old in book.dead():
        what: list[str] = []
        problems: list[str] = []
        steps = set(old.steps)
        pgid, token = old.script.get("pgid"), old.script.get("token")
        members = (scriptguard.proven_members(pgid, token)
                   if isinstance(pgid, int) and isinstance(token, str) else [])
        pids = set(members) | set(old.srun_pids)
        if pids and old.host == socket.gethostname():
            try:
                steps |= {s.step_id for s in _numbered(backend.step_details(old.allocation))
                          if s.srun_pid in pids and s.srun_host == old.host}
            except JobNotFound:
                pass  # the allocation is gone, and its steps with it
            except BackendError as exc:
                problems.append(f"could not list the steps of {old.allocation}: {exc}")
        if old.script:  # the backend proves the group ours before it stops anything
            stopped = backend.stop_stale_script(old.script)
            if stopped:
                what.append(f"its script ({stopped})")
        if not pids and not old.ended and old.script and old.allocation == alloc_id \
                and not book.live(alloc_id):
            # no step listed, no group left to ask: alone on the allocation, every
            # numbered step is that run's (as when one run at a time was the rule)
            try:
                steps |= {s.step_id for s in _numbered(backend.step_details(alloc_id))}
            except BackendError as exc:
                problems.append(f"could not list the steps of {alloc_id}: {exc}")
        done = _cancel(backend, old.allocation, sorted(steps), problems)
        left = _wait_gone(backend, old.allocation, done, clock, gone_wait_s, problems)
        left += [s for s in steps if s not in done]
        what += [f"step {old.allocation}.{s}" for s in sorted(done) if s not in left]
        if left or problems:
            try:
                book.save(attrs.evolve(old, steps=tuple(sorted(left))))
            except OSError as exc:
                problems.append(f"could not update the run record of that run: {exc}")
        else:
            book.delete(old)
        if what:
            out.append(f"stopped what an earlier run that died left running: {', '.join(what)}"
                       f" (left by an earlier run started {old.since}, log {old.log or '?'})")
        out.extend(problems)
    return out


def _pgid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            return int(fh.read().rsplit(")", 1)[-1].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def running_jobs(backend: SlurmBackend, book: RunBook, alloc_id: str) -> list[dict[str, object]]:
    """The jobs running on ``alloc_id`` (live leases), for ``status``: each with its
    steps and the GPUs each holds (one ``scontrol show step`` when there is a job; a step
    is a job's when its srun, on this host, is in the job's script group, or when the
    job's record lists it)."""
    leases = book.live(alloc_id)
    if not leases:
        return []
    try:
        steps = _numbered(backend.step_details(alloc_id))
    except BackendError:
        steps = []
    host = socket.gethostname()
    out: list[dict[str, object]] = []
    for rec in leases:
        pgid = rec.script.get("pgid")
        mine = [s for s in steps if s.step_id in rec.steps or (
            s.srun_pid is not None and s.srun_host == host == rec.host
            and isinstance(pgid, int) and _pgid_of(s.srun_pid) == pgid)]
        if not mine and len(leases) == 1:
            mine = [s for s in steps if s.srun_pid is None]
        info = rec.public()
        info["steps"] = [{"id": s.full_id, "name": s.name, "nodes": s.nodelist,
                          "gpus": s.gpus, "tres": s.tres} for s in mine]
        out.append(info)
    return out
