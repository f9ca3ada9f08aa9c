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
    batch_cpu_args,
    cpu_share,
    script_env,
    script_memory,
    waiting_advice,
)
from slurm_fsm.scriptguard import SRUN_SETTLE_S
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
    assert len(msgs) == 1 and msgs[0].startswith("waiting for GPUs (this job asks 1 per node)")
    assert "alloc_gpus_per_node" in msgs[0]  # how to make the allocation bigger
    w("srun: Step created for job 7\nresult\n")
    assert msgs[1].startswith("step started after waiting")
    assert "".join(out).endswith("result\n")
    assert w.queued == 1 and not w.waiting


def test_the_waiting_message_says_the_allocations_size_and_how_to_grow_it() -> None:
    msgs: list[str] = []
    w = QueueWatch(lambda _t: None, msgs.append, gpus_per_node=1,
                   allocation_gpus_per_node=2, allocation_id="7")
    w("srun: Job 7 step creation temporarily disabled, retrying (Requested nodes are busy)\n")
    assert "allocation 7 has 2 GPU(s) per node" in msgs[0]
    assert "alloc_gpus_per_node" in msgs[0] and "release" in msgs[0]
    unknown = waiting_advice(1)
    assert "slurm-fsm status" in unknown and "alloc_gpus_per_node" in unknown
    assert "CPUs" in waiting_advice(0)


# ------------------------------------------------------------- issue 23 fix 2 and 4


@pytest.mark.parametrize(("kw", "cpus", "gpus", "expected"), [
    ({"gpus_per_node": 1}, 8, 4, 2),  # 1 GPU of 4 on 8 CPUs: a quarter
    ({"gpus_per_node": 2}, 8, 4, 4),
    ({"gpus_per_node": 1, "ntasks_per_node": 2}, 8, 4, None),  # 2 CPUs over 2 tasks: 1
    ({"gpus_per_node": 4}, 8, 4, 8),  # every GPU: every CPU of the node
    ({"gpus_per_node": 4, "ntasks_per_node": 4}, 8, 4, 2),
    ({"gpus_per_node": 1}, 128, 1, 128),  # a node-exclusive grant: all of it
    ({}, 8, 0, 8),  # no GPU in the allocation: the node's CPUs are the job's
    ({}, 8, 4, None),  # beside GPU jobs a CPU job takes one CPU per task
    ({"gpus_per_node": 1}, None, 4, None),  # CPUs not known (an old state file)
    ({"gpus_per_node": 1}, 3, 4, None),  # 3 x 1/4 rounds to 0: Slurm's one CPU
    ({"gpus_per_node": 1, "cpus_per_task": 3}, 8, 4, 3),  # the spec says
    ({"cpus_per_task": 1}, 8, 0, 1),
])
def test_a_jobs_cpu_share_follows_its_gpus_unless_the_spec_says(
        kw: dict[str, int], cpus: int | None, gpus: int, expected: int | None) -> None:
    assert cpu_share(params(**kw), cpus, gpus) == expected


def test_the_cpu_share_is_exported_for_22_05_and_later() -> None:
    """22.05's srun reads SRUN_CPUS_PER_TASK only (not SLURM_CPUS_PER_TASK); later
    versions read both."""
    env = Placement.of(params(gpus_per_node=1), alloc_cpus_per_node=8,
                       alloc_gpus_per_node=4).env()
    assert (env["SRUN_CPUS_PER_TASK"], env["SLURM_CPUS_PER_TASK"]) == ("2", "2")
    assert env["SLURM_EXACT"] == "1"
    plain = Placement.of(params(gpus_per_node=1)).env()  # allocation unknown
    assert "SRUN_CPUS_PER_TASK" not in plain and "SLURM_CPUS_PER_TASK" not in plain


def test_script_env_carries_the_share_of_the_allocation(tmp_path: Path) -> None:
    env = script_env(INFO, params(gpus_per_node=2), alloc_cpus_per_node=16,
                     alloc_gpus_per_node=4)
    assert env["SRUN_CPUS_PER_TASK"] == "8"


@pytest.mark.parametrize("gpus", [None, 0])
def test_a_job_that_asks_no_gpu_asks_no_gres(gpus: int | None) -> None:
    """Else its steps inherit the allocation's GRES: every GPU (issue 23 fix 4)."""
    env = Placement.of(params(gpus_per_node=gpus)).env()
    assert env["SLURM_GRES"] == "none"
    assert "SLURM_GRES" not in Placement.of(params(gpus_per_node=1)).env()


def test_the_waiting_message_names_what_the_job_waits_for() -> None:
    said: list[str] = []
    cpu = QueueWatch(lambda _t: None, said.append, Placement.of(params(gpus_per_node=0)))
    cpu("srun: Job 7 step creation temporarily disabled, retrying (Requested nodes are busy)\n")
    assert said[0].startswith("waiting for CPUs (1 CPU per task; no GPU asked)")
    said.clear()
    gpu = QueueWatch(lambda _t: None, said.append,
                     Placement.of(params(gpus_per_node=1), alloc_cpus_per_node=8,
                                  alloc_gpus_per_node=4))
    gpu("srun: Job 7 step creation temporarily disabled, retrying (Requested nodes are busy)\n")
    assert said[0].startswith("waiting for GPUs (this job asks 1 per node, 2 CPU(s) per task)")


def test_one_shot_passes_cpus_per_task_unless_the_script_says(tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=1\nsrun true\n")
    assert batch_cpu_args(params(), script) == ([], [])
    assert batch_cpu_args(params(cpus_per_task=4), script) == (["--cpus-per-task=4"], [])
    script.write_text("#!/bin/bash\n#SBATCH --cpus-per-task=2\nsrun true\n")
    args, warnings = batch_cpu_args(params(cpus_per_task=4), script)
    assert args == [] and "#SBATCH --cpus-per-task=2 is used" in warnings[0]
    assert batch_cpu_args(params(cpus_per_task=2), script) == ([], [])


# ---------------------------------------- "waiting for GPUs" on Slurm 24.11 (issue 23, K1)

def test_queue_watch_says_waiting_from_a_started_line_alone() -> None:
    # 24.11's srun waits silently and prints only "Step created for StepId=..." after
    # the wait (22.05's too, after its "temporarily disabled" line): the wait is said
    msgs: list[str] = []
    w = QueueWatch(lambda _t: None, msgs.append, gpus_per_node=1)
    w("srun: Step created for StepId=80.4\n")
    assert [m.split(":")[0] for m in msgs] == ["waiting for GPUs (this job asks 1 per node)",
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
    pending = PendingSteps(lambda _t: backend.step_details("7"), pids, clock,
                           is_srun=lambda p: p in (200, 300))
    assert pending() == [] and backend.asked == 0  # srun 200 is new: not asked about yet
    clock.advance(SRUN_SETTLE_S)
    found = pending()
    assert [(s.step_id, s.srun_pid) for s in found] == [("TDB", 200)]  # not another run's
    assert pending() == found and backend.asked == 1  # rate-limited
    clock.advance(PENDING_POLL_S)
    pending()
    assert backend.asked == 2


def test_pending_steps_ask_nothing_once_every_srun_has_started() -> None:
    clock = FakeClock()
    backend = Steps([_step("0", "RUNNING", 200)])
    pending = PendingSteps(lambda _t: backend.step_details("7"), {100, 200}, clock,
                           is_srun=lambda p: p == 200, settle_s=0)
    assert pending() == [] and backend.asked == 1
    for _ in range(5):
        clock.advance(PENDING_POLL_S)
        assert pending() == []
    assert backend.asked == 1  # srun 200 runs its step: no more questions
    no_srun = Steps([])
    assert PendingSteps(lambda _t: no_srun.step_details("7"), {100}, clock,
                        is_srun=lambda p: False)() == []
    assert no_srun.asked == 0


def test_an_srun_that_ends_young_costs_no_question() -> None:
    """Issue 28: a tiny job's srun is gone before it has run SRUN_SETTLE_S; Slurm is
    never asked about it. Sruns of one run seen at different times: each waits its own
    settling (a younger one does not hold back an older one)."""
    clock = FakeClock()
    pids = {200}
    backend = Steps([_step("TDB", "PENDING", 200), _step("TDB", "PENDING", 300)])
    pending = PendingSteps(lambda _t: backend.step_details("7"), pids, clock,
                           is_srun=lambda p: p in pids)
    assert pending() == []
    clock.advance(SRUN_SETTLE_S / 2)
    pids.clear()  # ended young
    clock.advance(SRUN_SETTLE_S)
    assert pending() == [] and backend.asked == 0
    pids.update({300})
    assert pending() == [] and backend.asked == 0
    clock.advance(SRUN_SETTLE_S / 2)
    pids.add(400)  # a newer one
    assert pending() == [] and backend.asked == 0
    clock.advance(SRUN_SETTLE_S / 2)
    assert [s.srun_pid for s in pending()] == [300] and backend.asked == 1


def test_queue_watch_polls_pending_steps_once_and_a_silent_slurm_is_no_wait() -> None:
    clock = FakeClock()
    backend = Steps(BackendError("scontrol: timed out"), [_step("TDB", "PENDING", 200)])
    msgs: list[str] = []
    w = QueueWatch(lambda _t: None, msgs.append, gpus_per_node=2,
                   pending=PendingSteps(lambda _t: backend.step_details("7"), {200}, clock,
                                        is_srun=lambda p: True, settle_s=0))
    w.poll()
    assert msgs == [] and not w.waiting  # Slurm did not answer: nothing said
    clock.advance(PENDING_POLL_S)
    w.poll()
    w.poll()
    assert len(msgs) == 1 and msgs[0].startswith("waiting for GPUs (this job asks 2 per node)")
    assert "step 7.TDB of this run is PENDING" in msgs[0]
    w("srun: Step created for StepId=7.4\n")
    assert msgs[-1].startswith("step started after waiting") and w.queued == 1
