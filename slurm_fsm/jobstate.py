"""Slurm's job states as one vocabulary: :class:`JobState` and what each one means.

A :class:`JobState` is a :class:`~enum.StrEnum`, so it compares equal to the text
Slurm prints (``JobState.RUNNING == "RUNNING"``) and goes into JSON as that text.
:meth:`JobState.parse` reads what ``squeue``, ``sacct`` and ``scontrol`` print
(``CANCELLED by 0``, ``CANCELLED+``, ``running``); a state this module does not
know comes back as :attr:`JobState.UNKNOWN`, never as an error.

The predicates are the questions the procedure asks of a state. Which report
status a *final* state decides by itself is
:func:`slurm_fsm.results.status_of_state`, the one place for it.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["MEANINGS", "JobState", "to_job_state"]


class JobState(StrEnum):
    """A Slurm job (or step) state, as ``squeue %T`` and ``sacct State`` print it."""

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    SUSPENDED = "SUSPENDED"
    RESIZING = "RESIZING"
    REQUEUED = "REQUEUED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    DEADLINE = "DEADLINE"
    CANCELLED = "CANCELLED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    NODE_FAIL = "NODE_FAIL"
    BOOT_FAIL = "BOOT_FAIL"
    PREEMPTED = "PREEMPTED"
    REVOKED = "REVOKED"
    STOPPED = "STOPPED"
    SIGNALING = "SIGNALING"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    REQUEUE_FED = "REQUEUE_FED"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    STAGE_OUT = "STAGE_OUT"
    #: Any state this module does not know (or a blank one).
    UNKNOWN = "UNKNOWN"

    @classmethod
    def parse(cls, text: str | None) -> JobState:
        """Slurm's text as a state: ``CANCELLED by 0`` and ``CANCELLED+`` ->
        CANCELLED, ``running`` -> RUNNING; ``OUT_OF_ME+`` (sacct cuts a column at 10
        characters and marks the cut with ``+``) -> the one state that starts so;
        blank, None or unknown text -> UNKNOWN."""
        if isinstance(text, JobState):
            return text
        words = (text or "").strip().split()
        if not words:
            return cls.UNKNOWN
        word = words[0].upper()
        try:
            return cls(word.rstrip("+"))
        except ValueError:
            pass
        if word.endswith("+") and len(word) > 1:
            stem = word.rstrip("+")
            found = [s for s in cls if s is not cls.UNKNOWN and s.value.startswith(stem)]
            if len(found) == 1:
                return found[0]
        return cls.UNKNOWN

    @property
    def is_active(self) -> bool:
        """The job holds (or will hold) resources: pending, starting, running, ending,
        suspended, resizing or requeued. Slurm still lists it in ``squeue``."""
        return self in _ACTIVE

    @property
    def is_pending(self) -> bool:
        """Waiting to run: PENDING, CONFIGURING (nodes booting), or held or requeued
        (REQUEUED, REQUEUE_HOLD, REQUEUE_FED, RESV_DEL_HOLD, SPECIAL_EXIT): still there,
        and may run later."""
        return self in _WAITING

    @property
    def is_running(self) -> bool:
        """RUNNING: steps can start in it."""
        return self is JobState.RUNNING

    @property
    def is_ending(self) -> bool:
        """COMPLETING or STAGE_OUT (its processes are done, files are being staged
        out): on its way out; never reused, never waited for."""
        return self in (JobState.COMPLETING, JobState.STAGE_OUT)

    @property
    def meaning(self) -> str:
        """What ``squeue(1)`` says the state means, and what it means here for "still
        there" (:data:`MEANINGS`)."""
        return MEANINGS[self]

    @property
    def is_live(self) -> bool:
        """Active and not ending: a job that can still be (or become) the allocation."""
        return self.is_active and not self.is_ending

    @property
    def is_final(self) -> bool:
        """The job has ended: accounting's word on it will not change."""
        return self in _FINAL

    @property
    def exited(self) -> bool:
        """Ended on its own (COMPLETED or FAILED): its exit code says how it went,
        not Slurm (no time limit, cancel, node failure or OOM kill)."""
        return self in (JobState.COMPLETED, JobState.FAILED)

    @property
    def ended_how(self) -> str:
        """What a final state says happened, in words (``reached its time limit``)."""
        return _ENDED_HOW.get(self, f"became {self.value}")


def to_job_state(text: str | None) -> JobState:
    """:meth:`JobState.parse` as a plain function: the attrs converter of every
    ``state`` field (``JobInfo(state="RUNNING")`` keeps working)."""
    return JobState.parse(text)


_WAITING = frozenset({
    JobState.PENDING, JobState.CONFIGURING, JobState.REQUEUED, JobState.REQUEUE_HOLD,
    JobState.REQUEUE_FED, JobState.RESV_DEL_HOLD, JobState.SPECIAL_EXIT,
})
_ACTIVE = _WAITING | frozenset({
    JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED, JobState.RESIZING,
    JobState.STOPPED, JobState.SIGNALING, JobState.STAGE_OUT,
})
_FINAL = frozenset({
    JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.DEADLINE,
    JobState.CANCELLED, JobState.OUT_OF_MEMORY, JobState.NODE_FAIL, JobState.BOOT_FAIL,
    JobState.PREEMPTED, JobState.REVOKED,
})
#: Every state ``squeue(1)`` lists (Slurm 22.05, section JOB STATE CODES), what it
#: means, and what it means for "still there": an active state keeps the one-shot monitor
#: watching and keeps a persistent allocation's state file (a held or stopped allocation
#: is waited for or reported, never dropped and allocated anew beside it).
MEANINGS: dict[JobState, str] = {
    JobState.BOOT_FAIL: "ended: launch failure (a node could not boot); gone",
    JobState.CANCELLED: "ended: cancelled by the user or an administrator; gone",
    JobState.COMPLETED: "ended: every process exited 0; gone",
    JobState.CONFIGURING: "allocated, nodes getting ready (booting); still there, waiting",
    JobState.COMPLETING: "processes ending on some nodes; still listed, never reused",
    JobState.DEADLINE: "ended: reached its deadline; gone",
    JobState.FAILED: "ended: non-zero exit or another failure; gone",
    JobState.NODE_FAIL: "ended: a node of the job failed; gone",
    JobState.OUT_OF_MEMORY: "ended: out of memory; gone",
    JobState.PENDING: "waiting for resources; still there, waiting",
    JobState.PREEMPTED: "ended: preempted; gone",
    JobState.RUNNING: "has its allocation, running; still there, steps can start",
    JobState.RESV_DEL_HOLD: "held: its reservation was deleted; still there, waiting",
    JobState.REQUEUE_FED: "being requeued by a federation; still there, waiting",
    JobState.REQUEUE_HOLD: "held job being requeued; still there, waiting",
    JobState.REQUEUED: "completing job being requeued; still there, waiting",
    JobState.RESIZING: "about to change size; still there",
    JobState.REVOKED: "ended: a sibling of a federated job ran elsewhere; gone",
    JobState.SIGNALING: "being signalled; still there",
    JobState.SPECIAL_EXIT: "requeued in a special (held) state; still there, waiting",
    JobState.STAGE_OUT: "staging out files after its processes ended; still listed, "
                        "never reused",
    JobState.STOPPED: "has its allocation (CPUs kept), execution stopped by SIGSTOP; "
                      "still there, not running",
    JobState.SUSPENDED: "has its allocation, execution suspended (CPUs released); "
                        "still there, not running",
    JobState.TIMEOUT: "ended: reached its time limit; gone",
    JobState.UNKNOWN: "a state this version does not know (or none); taken as gone",
}
_ENDED_HOW = {
    JobState.TIMEOUT: "reached its time limit",
    JobState.DEADLINE: "reached its deadline",
    JobState.CANCELLED: "was cancelled",
    JobState.PREEMPTED: "was preempted",
    JobState.NODE_FAIL: "lost a node",
}
