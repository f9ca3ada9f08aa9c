"""Run records (one per run, each its lease), the lease gate, and the step listing parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from slurm_fsm.backend import StepInfo
from slurm_fsm.clock import Clock
from slurm_fsm.lease import AllocationInUse, LeaseGate
from slurm_fsm.runrecord import RunBook, owner_alive
from slurm_fsm.slurmcli import parse_scontrol_steps

#: ``scontrol -o show step 1`` on the local cluster (Slurm 22.05), two steps, one with GPUs
SCONTROL_STEPS = (
    "StepId=1.0 UserId=0 StartTime=2026-12-03T13:08:53 TimeLimit=UNLIMITED State=RUNNING "
    "Partition=debug NodeList=n1 Nodes=1 CPUs=1 Tasks=1 Name=sleep Network=(null) "
    "TRES=cpu=1,mem=512M,node=1 ResvPorts=(null) CPUFreqReq=Default Dist=Cyclic "
    "SrunHost:Pid=vm:27828\n"
    "StepId=1.1 UserId=0 StartTime=2026-12-03T13:08:53 TimeLimit=UNLIMITED State=RUNNING "
    "Partition=debug NodeList=n[1-2] Nodes=2 CPUs=2 Tasks=2 Name=python Network=(null) "
    "TRES=cpu=2,mem=1G,node=2,gres/gpu=2 ResvPorts=(null) CPUFreqReq=Default Dist=Block "
    "SrunHost:Pid=vm:27830\n"
)


def test_scontrol_steps_give_the_srun_and_the_gpus() -> None:
    a, b = parse_scontrol_steps(SCONTROL_STEPS, "1")
    assert (a.step_id, a.srun_host, a.srun_pid, a.gpus, a.nodelist) == ("0", "vm", 27828,
                                                                      None, "n1")
    assert (b.step_id, b.name, b.srun_pid, b.gpus, b.nodelist) == ("1", "python", 27830, 2,
                                                                  "n[1-2]")
    assert parse_scontrol_steps(SCONTROL_STEPS, "2") == []
    assert parse_scontrol_steps("Job step 1. not found\n", "1") == []
    with pytest.raises(ValueError):
        parse_scontrol_steps("garbage line\n", "1")
    assert StepInfo(job_id="1", step_id="0", tres="gres/gpu:a100=4").gpus == 4


#: ``scontrol -d -o show step 6`` recorded on the local cluster (Slurm 22.05.8, 4
#: emulated GPUs per node), a step started with SLURM_EXACT=1 SLURM_GPUS_PER_NODE=1:
#: its GPUs are only in TresPerNode, not in TRES
SCONTROL_STEP_GPU_22_05 = (
    "StepId=6.0 UserId=0 StartTime=2026-12-03T14:50:27 TimeLimit=UNLIMITED State=RUNNING "
    "Partition=debug NodeList=n1 Nodes=1 CPUs=1 Tasks=1 Name=sleep Network=(null) "
    "TRES=cpu=1,mem=512M,node=1 ResvPorts=(null) CPUFreqReq=Default Dist=Cyclic "
    "SrunHost:Pid=vm:28456 TresPerStep=cpu:1 TresPerNode=gres:gpu:1\n"
)


def test_a_steps_gpus_are_read_from_what_it_asked_when_tres_leaves_them_out() -> None:
    (step,) = parse_scontrol_steps(SCONTROL_STEP_GPU_22_05, "6")
    assert step.gpus == 1 and step.srun_pid == 28456
    two_nodes = SCONTROL_STEP_GPU_22_05.replace("Nodes=1", "Nodes=2").replace(
        "gres:gpu:1", "gres:gpu:h100:2")
    assert parse_scontrol_steps(two_nodes, "6")[0].gpus == 4
    per_task = SCONTROL_STEP_GPU_22_05.replace("TresPerNode=gres:gpu:1",
                                               "TresPerTask=gres:gpu:1").replace(
        "Tasks=1", "Tasks=3")
    assert parse_scontrol_steps(per_task, "6")[0].gpus == 3
    none = SCONTROL_STEP_GPU_22_05.replace(" TresPerNode=gres:gpu:1", "")
    assert parse_scontrol_steps(none, "6")[0].gpus is None


def test_a_record_is_written_privately_and_read_back(tmp_path: Path) -> None:
    book = RunBook(tmp_path / ".slurm_alloc.json")
    rec = book.start("12", spec="s.slurm", model="m", container="c")
    path = book.path(rec.run_id)
    assert path.name == f".slurm_run.{rec.run_id}.json"
    assert (path.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left
    assert book.records() == [rec] and book.live("12") == [rec] and book.dead() == []
    assert book.live("13") == []
    assert owner_alive(rec)
    book.delete(rec)
    assert book.records() == []


def test_the_fake_backend_s_records_are_apart(tmp_path: Path) -> None:
    real = RunBook(tmp_path / ".slurm_alloc.json")
    fake = RunBook(tmp_path / ".slurm_alloc.fake.json")
    fake.start("100")
    assert real.records() == [] and len(fake.records()) == 1


def test_planted_links_fifos_and_foreign_names_are_never_read(tmp_path: Path) -> None:
    book = RunBook(tmp_path / ".slurm_alloc.json")
    rec = book.start("12")
    secret = tmp_path / "secret.json"
    secret.write_bytes(rec.to_json())
    (tmp_path / ".slurm_run.r0123456789ab.json").symlink_to(secret)
    os.mkfifo(tmp_path / ".slurm_run.rabcdefabcdef.json")  # would hang a plain open
    (tmp_path / ".slurm_run.json").write_bytes(rec.to_json())  # the old single name
    (tmp_path / ".slurm_run.rzzzzzzzzzzzz.json").write_bytes(rec.to_json())
    # a record whose file name is not its own run id
    (tmp_path / ".slurm_run.r111111111111.json").write_bytes(rec.to_json())
    assert book.records() == [rec]


def test_a_record_of_a_dead_orchestrator_is_no_lease(tmp_path: Path) -> None:
    book = RunBook(tmp_path / ".slurm_alloc.json")
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = attrs.evolve(book.start("12"), pid=int(child.stdout))
    book.save(dead)
    assert not owner_alive(dead)
    assert book.live() == [] and book.dead() == [dead]
    ended = attrs.evolve(book.start("12"), ended=True)  # alive, but its job has ended
    book.save(ended)
    assert book.live() == [] and ended in book.dead()


def test_dead_skips_without_reading_the_live_records_this_process_wrote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 0 of each of a run_many's runs looks for dead runs' records under the lock:
    its siblings' records (this process's, alive by being this process) are not read
    again; another process's, and one this process saved as ended, still are."""
    from slurm_fsm import runrecord

    book = RunBook(tmp_path / ".slurm_alloc.json")
    mine = [book.start("12") for _ in range(3)]
    from slurm_fsm.scriptguard import start_ticks

    # init: alive, another process's run
    other = attrs.evolve(book.start("12"), pid=1, pid_ticks=start_ticks(1) or 0)
    book.save(other)
    ended = attrs.evolve(book.start("12"), ended=True)
    book.save(ended)
    read: list[str] = []
    real = runrecord.read_bounded

    def counting(path: Path, *args: object, **kwargs: object) -> bytes:
        read.append(Path(path).name)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runrecord, "read_bounded", counting)
    dead = book.dead()
    assert dead == [ended]
    assert sorted(read) == sorted(book.path(r.run_id).name for r in (other, ended))
    assert not any(book.path(r.run_id).name in read for r in mine)
    # once deleted, a record is no longer this process's to skip
    book.delete(mine[0])
    book.save(attrs.evolve(mine[0], pid=2**22 + 7))  # the same name, another pid: read
    read.clear()
    assert attrs.evolve(mine[0], pid=2**22 + 7) in book.dead()
    assert book.path(mine[0].run_id).name in read


class _Clock(Clock):
    def __init__(self) -> None:
        self.t = 0.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
        self.slept.append(seconds)


def test_the_gate_refuses_or_waits_and_says_whose(tmp_path: Path) -> None:
    book = RunBook(tmp_path / ".slurm_alloc.json")
    other = book.start("12", model="llama", container="c1")
    said: list[str] = []
    clock = _Clock()
    with pytest.raises(AllocationInUse, match=r"in use by 1 running job.*llama"):
        LeaseGate(book, wait_s=0, clock=clock).clear("12", "releasing it")
    LeaseGate(book, wait_s=0).clear("13", "releasing it")  # another allocation: free
    LeaseGate(book, wait_s=0).clear("12", "installing", "c2")  # another container
    gate = LeaseGate(book, wait_s=5, clock=clock, say=said.append)
    with pytest.raises(AllocationInUse):
        gate.clear("12", "releasing it")
    assert clock.t >= 5 and len(said) == 1 and f"pid {other.pid}" in said[0]
    gate.own = other.run_id  # a run never waits for itself
    gate.clear("12", "releasing it")

    class Ends(_Clock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            book.delete(other)  # the job ends while the gate waits

    LeaseGate(book, wait_s=60, clock=Ends()).clear("12", "releasing it")


def test_a_zombie_orchestrator_holds_no_lease(tmp_path: Path) -> None:
    """Issue 26 item 4: a killed orchestrator not yet reaped (a zombie) counted as alive:
    ``release --no-wait`` refused, ``status`` listed it."""
    import time

    from slurm_fsm.scriptguard import start_ticks

    book = RunBook(tmp_path / ".slurm_alloc.json")
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # never reaped below
    try:
        ticks = start_ticks(child.pid)
        assert ticks is not None
        rec = attrs.evolve(book.start("12"), pid=child.pid, pid_ticks=ticks)
        book.save(rec)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.05)
        assert start_ticks(child.pid) == ticks  # the zombie keeps its pid and start time
        assert not owner_alive(rec)
        assert book.live("12") == [] and book.dead() == [rec]
    finally:
        child.wait(timeout=30)


@pytest.mark.parametrize("bad", ["12 34", "--help", "-1", "12;rm"])
def test_a_record_with_a_malformed_allocation_is_skipped_with_a_warning(
        tmp_path: Path, bad: str) -> None:
    """Issue 26 item 6: such a record made every later run end with "internal error"
    until it was deleted by hand. It is skipped, and the next run's warnings name it."""
    from slurm_fsm.runsteps import stop_leftovers
    from slurm_fsm.testing import FakeCluster

    book = RunBook(tmp_path / ".slurm_alloc.json")
    rec = book.start("12")
    data = json.loads(book.path(rec.run_id).read_text())
    data.update(allocation=bad, pid_ticks=-1)
    book.path(rec.run_id).write_text(json.dumps(data))
    fake = FakeCluster()
    warnings = stop_leftovers(fake, RunBook(tmp_path / ".slurm_alloc.json"), "12", fake.clock)
    assert len(warnings) == 1 and str(book.path(rec.run_id)) in warnings[0], warnings
    assert "not a Slurm job id" in warnings[0]
    assert fake.ops() == []  # no Slurm call
    assert book.records() == [] and book.dead() == []
