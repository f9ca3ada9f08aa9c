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

__all__ = ["JobState", "to_job_state"]


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
    #: Any state this module does not know (or a blank one).
    UNKNOWN = "UNKNOWN"

    @classmethod
    def parse(cls, text: str | None) -> JobState:
        """Slurm's text as a state: ``CANCELLED by 0`` and ``CANCELLED+`` ->
        CANCELLED, ``running`` -> RUNNING; blank, None or unknown text -> UNKNOWN."""
        if isinstance(text, JobState):
            return text
        words = (text or "").strip().split()
        if not words:
            return cls.UNKNOWN
        try:
            return cls(words[0].rstrip("+").upper())
        except ValueError:
            return cls.UNKNOWN

    @property
    def is_active(self) -> bool:
        """The job holds (or will hold) resources: pending, starting, running, ending,
        suspended, resizing or requeued. Slurm still lists it in ``squeue``."""
        return self in _ACTIVE

    @property
    def is_pending(self) -> bool:
        """Waiting to run: PENDING, or CONFIGURING (nodes booting)."""
        return self in (JobState.PENDING, JobState.CONFIGURING)

    @property
    def is_running(self) -> bool:
        """RUNNING: steps can start in it."""
        return self is JobState.RUNNING

    @property
    def is_ending(self) -> bool:
        """COMPLETING: on its way out; never reused, never waited for."""
        return self is JobState.COMPLETING

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


_ACTIVE = frozenset({
    JobState.PENDING, JobState.CONFIGURING, JobState.RUNNING, JobState.COMPLETING,
    JobState.SUSPENDED, JobState.RESIZING, JobState.REQUEUED,
})
_FINAL = frozenset({
    JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.DEADLINE,
    JobState.CANCELLED, JobState.OUT_OF_MEMORY, JobState.NODE_FAIL, JobState.BOOT_FAIL,
    JobState.PREEMPTED, JobState.REVOKED,
})
_ENDED_HOW = {
    JobState.TIMEOUT: "reached its time limit",
    JobState.DEADLINE: "reached its deadline",
    JobState.CANCELLED: "was cancelled",
    JobState.PREEMPTED: "was preempted",
    JobState.NODE_FAIL: "lost a node",
}
