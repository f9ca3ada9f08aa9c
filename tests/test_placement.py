"""slurm_fsm.placement: the environment that confines a persistent job's own srun."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from slurm_fsm.backend import JobInfo, StepInfo
from slurm_fsm.errors import BackendError
from slurm_fsm.placement import (
    PENDING_POLL_S,
    PendingSteps,
    Placement,
    QueueWatch,
    script_env,
    script_memory,
)
from slurm_fsm.spec import SlurmParams
from slurm_fsm.testing.fake import FakeClock

INFO = JobInfo(job_id="42", state="RUNNING", nodelist="n[1-2]")


def params(**kw: object) -> SlurmParams:
    return SlurmParams(partition="p", account="a", **kw)  # type: ignore[arg-type]


def test_ntasks_given_wins_over_nodes_times_tasks_per_node() -> None:
    """#17.5: ntasks: 2 (no ntasks_per_node) runs 2 ranks, as one-shot does."""
    env = Placement.of(params(ntasks=2)).env()
    assert env["SLURM_NTASKS"] == "2"
    assert env["SLURM_NTASKS_PER_NODE"] == "2"
    assert env["SLURM_NNODES"] == env["SLURM_JOB_NUM_NODES"] == "1"


def test_ntasks_per_node_alone_multiplies_by_nodes() -> None:
    env = Placement.of(params(nodes=2, ntasks_per_node=4)).env()
    assert (env["SLURM_NTASKS"], env["SLURM_NTASKS_PER_NODE"]) == ("8", "4")


def test_uneven_ntasks_exports_no_contradicting_tasks_per_node() -> None:
    env = Placement.of(params(nodes=2, ntasks=3)).env()
    assert env["SLURM_NTASKS"] == "3"
    assert "SLURM_NTASKS_PER_NODE" not in env


def test_defaults_one_task_per_node() -> None:
    env = Placement.of(params(nodes=2)).env()
    assert (env["SLURM_NTASKS"], env["SLURM_NTASKS_PER_NODE"]) == ("2", "1")


@pytest.mark.parametrize("gpus", [None, 0])
def test_no_gpus_asked_takes_none_but_stays_exact(gpus: int | None) -> None:
    env = Placement.of(params(gpus_per_node=gpus)).env()
    assert "SLURM_GPUS_PER_NODE" not in env
    assert env["SLURM_EXACT"] == "1"


def test_gpus_per_node_and_exact() -> None:
    env = Placement.of(params(gpus_per_node=2)).env()
    assert (env["SLURM_GPUS_PER_NODE"], env["SLURM_EXACT"]) == ("2", "1")


def test_script_env_has_the_allocation_and_the_share(tmp_path: Path) -> None:
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\n#SBATCH --mem=4G\n#SBATCH --mem-per-gpu=10G\nsrun true\n"
                      "#SBATCH --mem-per-cpu=1G\n")
    env = script_env(INFO, params(nodes=2, gpus_per_node=1), script)
    assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == "42"
    assert env["SLURM_NODELIST"] == env["SLURM_JOB_NODELIST"] == "n[1-2]"
    assert env["SLURM_MEM_PER_NODE"] == "4G"
    assert env["SLURM_MEM_PER_GPU"] == "10G"
    assert "SLURM_MEM_PER_CPU" not in env  # after the first command: not a directive


def test_unreadable_script_asks_no_memory(tmp_path: Path) -> None:
    assert script_memory(tmp_path / "missing.slurm") == {}


def test_queue_watch_says_waiting_once_and_started() -> None:
    out: list[str] = []
    msgs: list[str] = []
    w = QueueWatch(out.append, msgs.append, gpus_per_node=1)
    w("hello\nsrun: Job 7 step creation tempor")
    w("arily disabled, retrying (Requested nodes are busy)\n")
    w("srun: Job 7 step creation temporarily disabled, retrying (Requested nodes are busy)\n")
    assert len(msgs) == 1 and msgs[0].startswith("waiting for GPUs (1 per node)")
    w("srun: Step created for job 7\nresult\n")
    assert msgs[1].startswith("step started after waiting")
    assert "".join(out).endswith("result\n")
    assert w.queued == 1 and not w.waiting


# ---------------------------------------- "waiting for GPUs" on Slurm 24.11 (issue 23, K1)

def test_queue_watch_says_waiting_from_a_started_line_alone() -> None:
    # 24.11's srun waits silently and prints only "Step created for StepId=..." after
    # the wait (22.05's too, after its "temporarily disabled" line): the wait is said
    msgs: list[str] = []
    w = QueueWatch(lambda _t: None, msgs.append, gpus_per_node=1)
    w("srun: Step created for StepId=80.4\n")
    assert [m.split(":")[0] for m in msgs] == ["waiting for GPUs (1 per node)",
                                             "step started after waiting (srun"]
    assert w.queued == 1 and not w.waiting


def _step(step_id: str, state: str, pid: int | None, host: str | None = None) -> StepInfo:
    return StepInfo(job_id="7", step_id=step_id, state=state, srun_pid=pid,
                    srun_host=socket.gethostname() if host is None else host)


class Steps:
    def __init__(self, *answers: list[StepInfo] | BackendError) -> None:
        self.answers = list(answers)
        self.asked = 0

    def step_details(self, job_id: str) -> list[StepInfo]:
        assert job_id == "7"
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BackendError):
            raise answer
        return answer


def test_pending_steps_are_this_runs_queued_steps_from_slurm() -> None:
    clock = FakeClock()
    pids = {100, 200}  # 100: the script's bash, 200: its srun
    backend = Steps([_step("0", "RUNNING", 300), _step("TDB", "PENDING", 200),
                     _step("TDB", "PENDING", 999), _step("TDB", "PENDING", 200, "other")])
    pending = PendingSteps(backend, "7", pids, clock,  # type: ignore[arg-type]
                           is_srun=lambda p: p in (200, 300))
    found = pending()
    assert [(s.step_id, s.srun_pid) for s in found] == [("TDB", 200)]  # not another run's
    assert pending() == found and backend.asked == 1  # rate-limited
    clock.advance(PENDING_POLL_S)
    pending()
    assert backend.asked == 2


def test_pending_steps_ask_nothing_once_every_srun_has_started() -> None:
    clock = FakeClock()
    backend = Steps([_step("0", "RUNNING", 200)])
    pending = PendingSteps(backend, "7", {100, 200}, clock,  # type: ignore[arg-type]
                           is_srun=lambda p: p == 200)
    assert pending() == [] and backend.asked == 1
    for _ in range(5):
        clock.advance(PENDING_POLL_S)
        assert pending() == []
    assert backend.asked == 1  # srun 200 runs its step: no more questions
    no_srun = Steps([])
    assert PendingSteps(no_srun, "7", {100}, clock,  # type: ignore[arg-type]
                        is_srun=lambda p: False)() == []
    assert no_srun.asked == 0


def test_queue_watch_polls_pending_steps_once_and_a_silent_slurm_is_no_wait() -> None:
    clock = FakeClock()
    backend = Steps(BackendError("scontrol: timed out"), [_step("TDB", "PENDING", 200)])
    msgs: list[str] = []
    w = QueueWatch(lambda _t: None, msgs.append, gpus_per_node=2,
                   pending=PendingSteps(backend, "7", {200}, clock,  # type: ignore[arg-type]
                                        is_srun=lambda p: True))
    w.poll()
    assert msgs == [] and not w.waiting  # Slurm did not answer: nothing said
    clock.advance(PENDING_POLL_S)
    w.poll()
    w.poll()
    assert len(msgs) == 1 and msgs[0].startswith("waiting for GPUs (2 per node)")
    assert "step 7.TDB of this run is PENDING" in msgs[0]
    w("srun: Step created for StepId=7.4\n")
    assert msgs[-1].startswith("step started after waiting") and w.queued == 1
