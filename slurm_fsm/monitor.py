"""Step 3: wait for a job, watching its log for hangs and the wall clock.

Two loops share one policy:

* the **local** loop reads only the bytes a log gained since the last look
  (:class:`~slurm_fsm.logs.LogFollower`) and polls the local script process;
  it costs Slurm nothing, so it starts fast (10 ms) and backs off to 1 s;
* the **Slurm** loop (one-shot jobs only) asks the controller about the job
  at most once per poll, starting at 0.5 s and backing off to one query
  every 30 s for long jobs.

Both loops follow every file of the job through one
:class:`~slurm_fsm.joboutput.JobOutput` (persistent: the run's log; one-shot: ``.out``
and ``.err``) and, once the job has ended, read those files to their last byte
(:meth:`~slurm_fsm.joboutput.JobOutput.finish`) before the hang marker is judged: a
job that printed ``Hang detected after N seconds.`` and killed itself in the last poll
gap is a hang, not a failure.

The monitor never decides a job's status; it returns what it saw in a
:class:`Watch` and the results module decides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from slurm_fsm.backend import JobOutcome, RunningScript, SlurmBackend
from slurm_fsm.clock import Clock, backoff
from slurm_fsm.errors import BackendError, CommandTimedOut, ControllerUnreachable, JobNotFound
from slurm_fsm.joboutput import JobOutput
from slurm_fsm.jobstate import JobState
from slurm_fsm.runfacts import StepEnd

__all__ = ["PollPolicy", "Watch", "final_outcome", "step_end_of", "watch_batch_job",
           "watch_script"]

#: After the watcher cancels a one-shot job (hang, timeout, a reason it can never
#: start), how long it waits for Slurm to end it: the run returns once the job has no
#: ``squeue`` row or is final, not while it is still COMPLETING on its nodes (Slurm
#: 24.11 keeps a job cancelled right after its start COMPLETING for a while). Past
#: this the run says so and returns. Slurm's own KillWait default is 30 s.
CANCEL_SETTLE_S = 60.0


@attrs.frozen(kw_only=True)
class PollPolicy:
    """How often to look. Slurm polls back off from ``slurm_first_s`` to ``slurm_max_s``."""

    local_first_s: float = 0.01
    local_max_s: float = 1.0
    slurm_first_s: float = 0.5
    slurm_max_s: float = 30.0
    slurm_factor: float = 1.5
    pending_report_s: float = 300.0


@attrs.define(kw_only=True)
class Watch:
    """What the monitor saw."""

    exit_code: int | None = None  # persistent path: the script's exit status
    hang: bool = False
    timed_out: bool = False
    cancelled_steps: list[str] = attrs.field(factory=list)
    uncancelled_steps: list[str] = attrs.field(factory=list)  # asked, Slurm did not answer
    states: list[JobState] = attrs.field(factory=list)  # one-shot: Slurm states seen, in order
    elapsed_s: float = 0.0
    messages: list[str] = attrs.field(factory=list)
    bytes_read: int = 0
    never_starts: str = ""  # one-shot: the pending reason that can never clear (job cancelled)
    #: the hang marker was first read after the job had ended (it killed itself)
    hang_after_end: bool = False
    #: everything the job wrote, read to the end (None only for a Watch built by hand)
    output: JobOutput | None = None


def _finish(output: JobOutput, watch: Watch) -> None:
    """The job has ended: read its files to the last byte, then judge the marker."""
    output.finish()
    watch.bytes_read = output.bytes_read
    watch.output = output
    if output.hang_detected and not watch.hang:
        watch.hang = True
        watch.hang_after_end = True
    watch.messages.extend(p for p in [*output.problems, *output.gaps]
                          if p not in watch.messages)


Notify = Callable[[str], None]


def watch_script(
    script: RunningScript,
    *,
    timeout_s: float,
    clock: Clock,
    policy: PollPolicy = PollPolicy(),
    on_output: Notify | None = None,
    on_message: Notify | None = None,
    on_tick: Callable[[float, str], None] | None = None,
    stop: Callable[[Watch], None],
    output: JobOutput | None = None,
) -> Watch:
    """Persistent path: wait for ``bash <script>`` on its allocation.

    On a hang marker, ``stop`` cancels this run's steps (never the allocation, never
    another run's steps on it: :meth:`slurm_fsm.runsteps.RunSteps.stop`), then the
    local script is stopped; past ``timeout_s`` the same, reported as a timeout; also
    when the watch is interrupted. ``output`` follows the script's log (built here
    when not given).
    """
    watch = Watch()
    halt = stop
    follower = output or JobOutput([script.log_path], on_text=on_output)
    started = clock.now()
    say = on_message or (lambda _m: None)
    try:
        _script_loop(script, follower, watch, halt=halt,
                     timeout_s=timeout_s, clock=clock, policy=policy, say=say,
                     on_tick=on_tick, started=started)
    except BaseException:
        # interrupted (Ctrl-C, SIGTERM, a bug): the local script and its step must not
        # run on unwatched; the allocation itself stays
        say("interrupted: cancelling the running step and stopping the script")
        if script.poll() is None:
            try:
                halt(watch)
            finally:
                script.terminate()
        raise
    _finish(follower, watch)
    watch.elapsed_s = clock.now() - started
    return watch


def _script_loop(script: RunningScript, follower: JobOutput, watch: Watch, *,
                 halt: Callable[[Watch], None], timeout_s: float, clock: Clock,
                 policy: PollPolicy, say: Notify,
                 on_tick: Callable[[float, str], None] | None, started: float) -> None:
    attempt = 0
    while True:
        code = script.poll()
        follower.advance()
        if code is not None:
            watch.exit_code = code
            break
        now = clock.now()
        if follower.hang_detected:
            watch.hang = True
            say("hang detected in the log: cancelling the running step (allocation kept)")
            try:
                halt(watch)
            finally:
                script.terminate()
            watch.exit_code = script.poll()
            break
        if now - started >= timeout_s:
            watch.timed_out = True
            say(f"monitor timeout after {timeout_s:g} s: cancelling the running step")
            try:
                halt(watch)
            finally:
                script.terminate()
            watch.exit_code = script.poll()
            break
        if on_tick is not None:
            on_tick(now - started, follower.last_line)
        # wait on the script itself: its end is seen at once, not at the next poll
        script.wait_up_to(backoff(attempt, first=policy.local_first_s, cap=policy.local_max_s))
        attempt += 1


def _cancel_job(backend: SlurmBackend, job_id: str, watch: Watch) -> None:
    try:
        backend.cancel(job_id)
    except BackendError as exc:
        watch.messages.append(f"could not cancel job {job_id}: {exc}")


def _cancel_and_settle(backend: SlurmBackend, job_id: str, watch: Watch, *, clock: Clock,
                       policy: PollPolicy, say: Notify,
                       settle_s: float = CANCEL_SETTLE_S) -> None:
    """Cancel the job, then wait (bounded) until Slurm has ended it: no ``squeue`` row,
    or a state that is not active. A run never returns while its cancelled job still
    holds its nodes, within :data:`CANCEL_SETTLE_S`."""
    _cancel_job(backend, job_id, watch)
    started = clock.now()
    attempt = 0
    state = ""
    while True:
        try:
            info = backend.query_job(job_id)
        except JobNotFound:
            return  # no row: gone
        except (ControllerUnreachable, CommandTimedOut) as exc:
            state = f"unknown ({exc})"
        else:
            if not info.is_active:
                return
            state = str(info.state)
        waited = clock.now() - started
        if waited >= settle_s:
            problem = (f"job {job_id} is still {state} {waited:.0f} s after it was "
                       "cancelled; not waiting for it any longer")
            say(problem)
            watch.messages.append(problem)
            return
        clock.sleep(min(backoff(attempt, first=min(policy.slurm_first_s, 0.2),
                                factor=policy.slurm_factor, cap=2.0),
                        max(0.001, settle_s - waited)))
        attempt += 1


def watch_batch_job(
    job_id: str,
    *,
    backend: SlurmBackend,
    log_path: Path,
    timeout_s: float,
    clock: Clock,
    policy: PollPolicy = PollPolicy(),
    on_output: Notify | None = None,
    on_message: Notify | None = None,
    on_tick: Callable[[float, str], None] | None = None,
    on_state: Notify | None = None,
    output: JobOutput | None = None,
) -> Watch:
    """One-shot path: poll ``squeue`` (adaptively) until the job has no row.

    ``output`` follows the job's files (``.out`` and ``.err``); without it, ``log_path``
    alone is followed.

    State changes are reported; PENDING for longer than ``policy.pending_report_s``
    reports the reason and expected start once. A hang marker or the timeout
    cancels the job; so does an interruption of the watcher (Ctrl-C, SIGTERM): a
    job nobody watches any more would hold its nodes for nothing.
    """
    watch = Watch()
    say = on_message or (lambda _m: None)
    follower = output or JobOutput([log_path], on_text=on_output)
    started = clock.now()
    try:
        _batch_loop(job_id, watch, follower, backend=backend, timeout_s=timeout_s,
                    clock=clock, policy=policy, say=say, on_tick=on_tick, started=started,
                    on_state=on_state or (lambda _s: None))
    except BaseException:
        say(f"interrupted: cancelling job {job_id}")
        _cancel_job(backend, job_id, watch)
        raise
    _finish(follower, watch)
    watch.elapsed_s = clock.now() - started
    return watch


@attrs.define
class _Pending:
    """How long a batch job has been PENDING, and whether that was said."""

    since: float | None = None
    reported: bool = False


def _batch_look(job_id: str, watch: Watch, *, backend: SlurmBackend, clock: Clock,
                policy: PollPolicy, say: Notify, on_state: Notify, pending: _Pending,
                now: float) -> bool:
    """One question to Slurm about the batch job: its state change said, a job that can
    never start cancelled, a long wait said once. True when the watch is over."""
    try:
        info = backend.query_job(job_id)
    except JobNotFound:
        return True  # no row: the job is done
    except (ControllerUnreachable, CommandTimedOut) as exc:
        say(f"controller unreachable ({exc}); still waiting")
        return False
    if not watch.states or watch.states[-1] != info.state:
        watch.states.append(info.state)
        on_state(info.state)
        say(f"job {job_id}: {' -> '.join(watch.states)}")
    if not info.is_active:
        return True
    if info.never_starts:
        watch.never_starts = info.reason
        say(f"job {job_id} can never start (pending reason {info.reason}): cancelling it")
        _cancel_and_settle(backend, job_id, watch, clock=clock, policy=policy, say=say)
        return True
    if info.state is JobState.PENDING:
        pending.since = pending.since if pending.since is not None else now
        if not pending.reported and now - pending.since >= policy.pending_report_s:
            pending.reported = True
            say(f"job {job_id} pending for {now - pending.since:.0f} s: reason "
                f"{info.reason or 'unknown'}, expected start {info.start_time or '?'}")
    return False


def _batch_loop(job_id: str, watch: Watch, follower: JobOutput, *, backend: SlurmBackend,
                timeout_s: float, clock: Clock, policy: PollPolicy, say: Notify,
                on_tick: Callable[[float, str], None] | None, started: float,
                on_state: Notify) -> None:
    next_query = started
    slurm_attempt = 0
    local_attempt = 0
    pending = _Pending()
    while True:
        now = clock.now()
        follower.advance()
        if follower.hang_detected:
            watch.hang = True
            say(f"hang detected in the log: cancelling job {job_id}")
            _cancel_and_settle(backend, job_id, watch, clock=clock, policy=policy, say=say)
            return
        if now - started >= timeout_s:
            watch.timed_out = True
            say(f"monitor timeout after {timeout_s:g} s: cancelling job {job_id}")
            _cancel_and_settle(backend, job_id, watch, clock=clock, policy=policy, say=say)
            return
        if now >= next_query:
            if _batch_look(job_id, watch, backend=backend, clock=clock, policy=policy,
                           say=say, on_state=on_state, pending=pending, now=now):
                return
            next_query = now + backoff(slurm_attempt, first=policy.slurm_first_s,
                                       factor=policy.slurm_factor, cap=policy.slurm_max_s)
            slurm_attempt += 1
        if on_tick is not None:
            on_tick(now - started, follower.last_line)
        wait = min(backoff(local_attempt, first=policy.local_first_s, cap=policy.local_max_s),
                   max(0.0, next_query - clock.now()))
        clock.sleep(max(wait, 0.001))
        local_attempt += 1


def step_end_of(outcome: JobOutcome) -> StepEnd:
    """Accounting's row of one step (``outcome.job_id`` is ``ID.N``) as a
    :class:`~slurm_fsm.runfacts.StepEnd`: the one conversion both paths use (a
    persistent run's ``sacct -j ALLOC.N``, a one-shot job's step rows), so neither
    forgets a field."""
    return StepEnd(step=outcome.job_id, state=outcome.state, exit_code=outcome.exit_code,
                   signal=outcome.signal, cancelled_by=outcome.cancelled_by,
                   max_rss=outcome.max_rss_bytes, memory_limit=outcome.memory_limit)


def final_outcome(backend: SlurmBackend, job_id: str, clock: Clock,
                  attempts: int = 6, parts: Sequence[str] = ()) -> tuple[JobOutcome | None, str]:
    """Accounting's word on how a finished job ended, asked a few times with backoff
    (sacct sees a job 0.1-0.25 s after it ends). ``parts``: the array tasks or het
    components the job has (``16_0``, ``19+1``): its word counts only once it lists each
    of them (while it lags it shows a bare ``16`` row, the state of one task). ``(None,
    why)`` when nobody knows."""
    last = ""
    for attempt in range(attempts):
        try:
            outcome = backend.job_outcome(job_id)
        except (JobNotFound, ControllerUnreachable, CommandTimedOut) as exc:
            last = str(exc)
        else:
            listed = {p.job_id for p in outcome.parts}
            missing = [p for p in parts if p not in listed]
            if not outcome.state.is_active and not missing:
                return outcome, ""
            last = (f"accounting still says {outcome.state}" if outcome.state.is_active
                    else f"accounting lists no row yet for {', '.join(missing[:5])}")
        clock.sleep(min(0.2 * 2**attempt, 5.0))
    return None, f"accounting does not know how job {job_id} ended ({last})"
