"""The agent: a detached run's owner inside its allocation, so that the run, its
verdict and its lease outlive the login node.

A detached persistent run starts as a supervisor on the login node
(:mod:`slurm_fsm.supervise`): it does step 0 there and takes the run's lease. Then it
hands the run over (:func:`hand_over`): it starts the agent as one step of the
allocation on its first node (``srun --overlap --gres=none -N1 -n1 -w NODE -J
fsm-agent.<run id> python -m slurm_fsm.supervise --agent ...``, the task on the step's
stdin), which is the same supervisor program run there. The agent

* clears its own step's variables (:func:`scrub_environ`), so that each ``srun`` of the
  job's script becomes a step of the allocation placed as today's (its own GPUs and
  CPUs), as in a batch script;
* writes its progress to the run's progress file itself (never through the ``srun`` on
  the login node, which may be gone);
* runs the job as the supervisor would: step 0 again (a validation: it never allocates
  and never cancels the allocation it runs in, :class:`AgentBackend`), its own lease
  step (its ``srun`` is on the node: the lease lives as long as the agent), the
  script, the monitor, the verdict, saved beside the state file.

The supervisor keeps its own lease until the agent holds the run (its owner record
names the agent and the job has started, or it saved a report), then lets go of the
agent's step (:meth:`~slurm_fsm.backend.AgentHandle.let_go`: its ``srun`` ends, so that
no signal on the login node, a session's end included, can end the step) and ends. A step
whose ``srun``'s host dies whole is not ended by Slurm (measured,
shared/docs/design-detach.md): the agent goes on when the login node is gone.

Where the agent cannot run (the backend cannot start one, ``SLURM_FSM_AGENT=off``, or
its step ended before it took the run: no Python or no slurm_fsm on the node), the
supervisor runs the job itself, and the report says so in its warnings.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any, cast

from slurm_fsm.backend import AgentLauncher, AllocationRequest, LeaseHandle, SlurmBackend
from slurm_fsm.errors import BackendError, HandedOver, SlurmFsmError
from slurm_fsm.lease import lease_apart
from slurm_fsm.runowner import Owner, RunFiles, RunPhase
from slurm_fsm.slurmcli import AGENT_STEP_PREFIX

__all__ = ["AGENT_ENV", "DEVICE_VARS", "AgentBackend", "HandedOver", "agent_argv",
           "agent_enabled", "hand_over", "scrub_environ"]

#: ``SLURM_FSM_AGENT=off``: a detached run stays with its supervisor on the login node.
AGENT_ENV = "SLURM_FSM_AGENT"
#: The device variables of the agent's own step (it holds no GPU; the script's steps
#: get their own).
DEVICE_VARS = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES",
               "NVIDIA_VISIBLE_DEVICES")
#: How often the supervisor looks whether the agent holds the run.
POLL_S = 0.2
#: An agent that has not begun (no owner record of its own) this long after its
#: ``srun`` started, with no step of its name listed, is given up: that ``srun`` hangs
#: silent, its step never made (asked as slurmctld went down: the kill-point campaign)
AGENT_SILENT_S = 30.0


def agent_enabled(backend: SlurmBackend, environ: MutableMapping[str, str] | None = None
                  ) -> bool:
    """Can a detached run be handed to an agent: the backend starts one
    (:class:`~slurm_fsm.backend.AgentLauncher`) and ``SLURM_FSM_AGENT`` is not ``off``."""
    env = os.environ if environ is None else environ
    return (isinstance(backend, AgentLauncher)
            and env.get(AGENT_ENV, "").strip().lower() not in ("off", "0", "no"))


def scrub_environ(environ: MutableMapping[str, str]) -> str:
    """Clear the agent step's own variables from ``environ`` (every ``SLURM_*`` but
    ``SLURM_CONF``, and :data:`DEVICE_VARS`); the step's id, read before."""
    step = environ.get("SLURM_STEP_ID", "")
    for key in list(environ):
        if (key.startswith("SLURM_") and key != "SLURM_CONF") or key in DEVICE_VARS:
            del environ[key]
    return step


def agent_argv(state_path: Path, run_id: str, allocation_id: str) -> list[str]:
    """The agent's command line: this Python, this slurm_fsm."""
    return [sys.executable, "-m", "slurm_fsm.supervise", "--agent", str(state_path),
            run_id, allocation_id]


class AgentBackend:
    """The agent's backend: ``inner`` in all but two things. It never allocates (the
    run was started in allocation ``allocation``: another is not the agent's to make)
    and never cancels that allocation (it runs inside it): step 0 then fails, saying
    so, instead of the agent ending itself."""

    def __init__(self, inner: SlurmBackend, allocation: str, supervisor_lease: str = ""
                 ) -> None:
        self._inner = inner
        self.allocation = allocation
        #: the lease step its supervisor holds for the run until the agent holds it
        self.supervisor_lease = supervisor_lease

    def start_lease(self, job_id: str, name: str, timeout_s: float = 60.0) -> LeaseHandle:
        """The agent's lease, named apart from its supervisor's (:func:`lease_apart`):
        the backend reads a step of the lease's name as its own ``srun`` 's."""
        return self._inner.start_lease(job_id, lease_apart(name, self.supervisor_lease),
                                       timeout_s)

    def allocate(self, request: AllocationRequest, wait_s: float = 10.0) -> str:
        raise BackendError(
            f"the run's agent (inside allocation {self.allocation}) found that allocation "
            "gone or no longer fit for the job, and an agent never allocates: run the job "
            "again")

    def cancel(self, job_id: str, step_id: str | None = None) -> None:
        if step_id is None and job_id == self.allocation:
            raise BackendError(f"the run's agent runs inside allocation {job_id} and "
                               "never cancels it")
        self._inner.cancel(job_id, step_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @classmethod
    def wrap(cls, inner: SlurmBackend, allocation: str, supervisor_lease: str = ""
             ) -> SlurmBackend:
        """``inner`` wrapped, typed as the backend it stands for."""
        return cast(SlurmBackend, cls(inner, allocation, supervisor_lease))


def _holds(files: RunFiles, run_id: str) -> bool:
    """The agent holds the run: its owner record names it and its job has started, or
    its report is saved."""
    if files.report(run_id) is not None:
        return True
    rec = files.owner(run_id)
    return (rec is not None and rec.owner is Owner.AGENT
            and rec.phase is not RunPhase.STARTING)


def _begun(files: RunFiles, run_id: str) -> bool:
    """The agent has begun: the run's owner record is its own."""
    rec = files.owner(run_id)
    return rec is not None and rec.owner is Owner.AGENT


def _listed(backend: SlurmBackend, allocation_id: str, name: str) -> bool:
    """Slurm lists a step ``name`` of the allocation (False when it cannot say)."""
    try:
        return any(s.name == name for s in backend.list_steps(allocation_id))
    except SlurmFsmError:
        return False


def hand_over(backend: SlurmBackend, files: RunFiles, run_id: str, allocation_id: str,
              nodes: Sequence[str], task: bytes, *,
              say: Callable[[str], None] = lambda _text: None) -> str | None:
    """Start the run's agent on the first of ``nodes`` and wait until it holds the run
    (:func:`_holds`): None then. Else why it does not (the caller runs the job
    itself): the backend has no agent, its step could not start, or it ended first."""
    if not isinstance(backend, AgentLauncher) or not nodes:
        return "this backend cannot start an agent in the allocation"
    node = nodes[0]
    name = f"{AGENT_STEP_PREFIX}{run_id}"
    try:
        handle = backend.start_agent(allocation_id, node, name,
                                     agent_argv(files.paths.state, run_id, allocation_id),
                                     task)
    except (SlurmFsmError, OSError) as exc:
        return f"the run's agent could not be started on {node}: {exc}"
    say(f"handing the run over to its agent on {node} (step {name} of allocation "
        f"{allocation_id}): it goes on if this login node goes")
    silent_until: float | None = time.monotonic() + AGENT_SILENT_S
    try:
        while not _holds(files, run_id):
            if not handle.alive():
                if _holds(files, run_id):
                    break
                said = " ".join(handle.stderr_text().split())[-600:]
                return (f"the run's agent on {node} ended before it took the run over"
                        + (f": {said}" if said else ""))
            if silent_until is not None and time.monotonic() >= silent_until:
                if _begun(files, run_id) or _listed(backend, allocation_id, name):
                    silent_until = None  # it runs: it is slow, not lost
                else:
                    handle.stop()
                    return (f"the run's agent step {name} was not made in "
                            f"{AGENT_SILENT_S:.0f} s (its srun said nothing and Slurm "
                            "lists no such step)")
            time.sleep(POLL_S)
    except BaseException:  # stopped (cancel, Ctrl-C) before the agent held the run:
        handle.stop()  # its step ends too; the run is this process's to report
        raise
    handle.let_go()  # nothing on this host may end the agent's step now
    return None
