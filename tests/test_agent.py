"""The agent of a detached run (issue 39, tier B) on the fake cluster and in parts: the
hand-over from the supervisor (the agent holds the run, or the supervisor runs the job
and says why), the agent's backend that never allocates nor cancels the allocation it
runs in, the environment it clears. The real agent, in a real allocation, is tested in
tests/integration/test_detach_real.py."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from slurm_fsm import agent, slurmcli
from slurm_fsm.agent import AgentBackend, HandedOver, hand_over, scrub_environ
from slurm_fsm.backend import AllocationRequest, SlurmBackend, StepInfo
from slurm_fsm.duration import Duration
from slurm_fsm.errors import BackendError
from slurm_fsm.executor import Executor
from slurm_fsm.jobstate import JobState
from slurm_fsm.runowner import Owner, OwnerRecord, RunFiles, RunPhase
from slurm_fsm.state import AllocState
from slurm_fsm.supervise import main as supervise_main
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory


def test_the_agent_clears_its_own_steps_variables() -> None:
    env = {"SLURM_CONF": "/etc/slurm.conf", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "3",
           "SLURM_STEP_GPUS": "0", "SLURM_CPUS_PER_TASK": "1", "SLURM_SRUN_COMM_PORT": "9",
           "CUDA_VISIBLE_DEVICES": "0", "HOME": "/root", "PATH": "/bin"}
    assert scrub_environ(env) == "3"
    assert env == {"SLURM_CONF": "/etc/slurm.conf", "HOME": "/root", "PATH": "/bin"}


def test_agent_is_off_where_the_backend_cannot_start_one_or_the_user_says_so() -> None:
    from slurm_fsm.subprocess_backend import SubprocessBackend

    assert not agent.agent_enabled(FakeCluster(), {})
    assert agent.agent_enabled(SubprocessBackend(), {})
    assert not agent.agent_enabled(SubprocessBackend(), {agent.AGENT_ENV: "off"})
    assert not agent.agent_enabled(SubprocessBackend(), {agent.AGENT_ENV: "0"})


def test_the_agents_backend_never_allocates_nor_cancels_its_allocation() -> None:
    fake = FakeCluster()
    inner: SlurmBackend = fake
    wrapped = AgentBackend.wrap(inner, "5")
    with pytest.raises(BackendError, match=r"inside allocation 5.*never allocates"):
        wrapped.allocate(AllocationRequest(
            job_name="x", partition="debug", account="acct", nodes=1,
            time_limit=Duration.parse("00:10:00"), log_path=Path("/dev/null")))
    with pytest.raises(BackendError, match="never cancels it"):
        wrapped.cancel("5")
    cancelled: list[tuple[str, str | None]] = []
    fake.cancel = lambda job_id, step_id=None: cancelled.append((job_id, step_id))  # type: ignore[method-assign]
    wrapped.cancel("5", "2")  # a step of it: yes
    wrapped.cancel("6")  # another job: as the inner backend would
    assert cancelled == [("5", "2"), ("6", None)]
    assert wrapped.current_user() == fake.current_user()  # the rest: the inner one's


def test_the_agents_command_lines() -> None:
    assert slurmcli.srun_agent_argv("5", "n2", "fsm-agent.r1", ["py", "-m", "x"]) == [
        "srun", "--jobid=5", "-N1", "-n1", "--nodelist=n2", "--overlap", "--gres=none",
        "--job-name=fsm-agent.r1", "py", "-m", "x"]
    assert slurmcli.scancel_signal_argv("5", "2", "TERM") == [
        "scancel", "--signal=TERM", "5.2"]
    with pytest.raises(ValueError, match="signal name"):
        slurmcli.scancel_signal_argv("5", "2", "TERM;rm")
    argv = agent.agent_argv(Path("/r/work_dirs/.slurm_alloc.json"), "r0123456789ab", "5")
    assert argv[1:] == ["-m", "slurm_fsm.supervise", "--agent",
                        "/r/work_dirs/.slurm_alloc.json", "r0123456789ab", "5"]


@pytest.mark.parametrize("args", [
    ["--agent", "state.json", "r0123456789ab", "5;x"],  # not an allocation id
    ["--agent", "state.json", "r0123456789ab"],
    ["--agent", "state.json", "not-a-run", "5"],
])
def test_the_agents_entry_refuses_what_is_not_its_call(args: list[str],
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert supervise_main(args) == 2
    assert "usage" in capsys.readouterr().err


@attrs.define
class _Handle:
    lives: list[bool]
    said: str = ""
    stopped: bool = False
    let_go_: bool = False

    def alive(self) -> bool:
        return self.lives.pop(0) if self.lives else False

    def stderr_text(self) -> str:
        return self.said

    def stop(self) -> None:
        self.stopped = True

    def let_go(self) -> None:
        self.let_go_ = True


class _Launcher:
    """An AgentLauncher whose agent does what the test says."""

    def __init__(self, handle: _Handle, on_start: Any = None) -> None:
        self.handle = handle
        self.on_start = on_start
        self.steps: list[StepInfo] = []
        self.started: list[tuple[str, str, str, list[str], bytes]] = []

    def start_agent(self, job_id: str, node: str, name: str, argv: Sequence[str],
                    task: bytes) -> _Handle:
        self.started.append((job_id, node, name, list(argv), task))
        if self.on_start is not None:
            self.on_start()
        return self.handle

    def signal_step(self, job_id: str, step_id: str, signal_name: str) -> None:
        raise AssertionError("not asked here")

    def list_steps(self, job_id: str) -> list[StepInfo]:
        return list(self.steps)


def _agent_record(files: RunFiles, run_id: str, phase: RunPhase) -> None:
    rec = OwnerRecord.new(run_id, Owner.AGENT, mode="persistent", spec_path="s", spec={})
    files.write_owner(attrs.evolve(rec, phase=phase, host="n1"))


def test_hand_over_ends_when_the_agent_holds_the_run(tmp_path: Path) -> None:
    files = RunFiles(tmp_path / ".slurm_alloc.json")
    run_id = "r0123456789ab"
    launcher = _Launcher(_Handle([True] * 100),
                         on_start=lambda: _agent_record(files, run_id, RunPhase.RUNNING))
    said: list[str] = []
    assert hand_over(launcher, files, run_id, "5", ["n1", "n2"], b"{task}",  # type: ignore[arg-type]
                     say=said.append) is None
    [(job, node, name, argv, task)] = launcher.started
    assert (job, node, name, task) == ("5", "n1", f"fsm-agent.{run_id}", b"{task}")
    assert launcher.handle.let_go_ and not launcher.handle.stopped  # srun let go of it
    assert argv[-4:] == ["--agent", str(files.paths.state), run_id, "5"]
    assert said and "agent on n1" in said[0]


def test_an_agent_still_in_step0_does_not_hold_the_run_yet(tmp_path: Path) -> None:
    """Its owner record alone (phase starting) is not enough: the supervisor's lease
    stays until the agent's own lease holds the allocation and its job has started."""
    files = RunFiles(tmp_path / ".slurm_alloc.json")
    run_id = "r0123456789ab"
    launcher = _Launcher(_Handle([True, True, False], said="srun: error: n1: task 0: "
                                 "Exited with exit code 1"),
                         on_start=lambda: _agent_record(files, run_id, RunPhase.STARTING))
    why = hand_over(launcher, files, run_id, "5", ["n1"], b"{}")  # type: ignore[arg-type]
    assert why is not None and "ended before it took the run over" in why
    assert "Exited with exit code 1" in why


def test_a_supervisor_stopped_during_the_hand_over_stops_the_agent_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel (SIGTERM) or Ctrl-C while the agent is still in its step 0: the
    supervisor reports the run CANCELLED, so the agent's step must not go on to run the
    job and save another verdict over it."""
    files = RunFiles(tmp_path / ".slurm_alloc.json")
    handle = _Handle([True] * 100)

    def interrupted(_s: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("slurm_fsm.agent.time.sleep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        hand_over(_Launcher(handle), files, "r0123456789ab", "5", ["n1"], b"{}")  # type: ignore[arg-type]
    assert handle.stopped


def test_an_agent_step_never_made_is_given_up(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The kill-point campaign: an srun that asks for its step as slurmctld goes down
    hangs silent and makes no step. Before, the supervisor waited for that agent for
    ever, its lease held; now, with no owner record of the agent's and no step of its
    name after AGENT_SILENT_S, the srun is stopped and the supervisor runs the job."""
    monkeypatch.setattr(agent, "AGENT_SILENT_S", 0.3)
    files = RunFiles(tmp_path / ".slurm_alloc.json")
    handle = _Handle([True] * 10_000)
    why = hand_over(_Launcher(handle), files, "r0123456789ab", "5", ["n1"], b"{}")  # type: ignore[arg-type]
    assert why is not None and "was not made in" in why and handle.stopped


def test_a_slow_agent_whose_step_is_listed_is_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent, "AGENT_SILENT_S", 0.2)
    files = RunFiles(tmp_path / ".slurm_alloc.json")
    run_id = "r0123456789ab"
    launcher = _Launcher(_Handle([True] * 10_000))
    launcher.steps = [StepInfo(job_id="5", step_id="1", name=f"fsm-agent.{run_id}",
                               state=JobState.RUNNING)]
    ticks = iter(range(10_000))
    real_sleep = time.sleep

    def later(_s: float) -> None:  # the agent takes the run well after the silent limit
        real_sleep(0.02)
        if next(ticks) == 30:
            _agent_record(files, run_id, RunPhase.RUNNING)

    monkeypatch.setattr("slurm_fsm.agent.time.sleep", later)
    assert hand_over(launcher, files, run_id, "5", ["n1"], b"{}") is None  # type: ignore[arg-type]
    assert not launcher.handle.stopped


def test_no_agent_without_a_launcher(tmp_path: Path) -> None:
    why = hand_over(FakeCluster(), RunFiles(tmp_path / "s.json"), "r0123456789ab", "5",
                    ["n1"], b"{}")
    assert why == "this backend cannot start an agent in the allocation"


def test_a_run_handed_over_is_not_judged_here(make_spec: SpecFactory) -> None:
    """The supervisor's run ends with HandedOver, after step 0 and its lease: no report
    saved by it, its lease step stopped (the agent's own holds the allocation)."""
    spec = make_spec()
    fake = FakeCluster()
    executor = Executor(spec, fake)
    asked: list[AllocState] = []
    executor.hand_over = lambda alloc: asked.append(alloc) or None  # type: ignore[func-returns-value]
    with pytest.raises(HandedOver):
        executor.run()
    [alloc] = asked
    assert fake.query_job(alloc.job_id).state.is_running
    assert RunFiles(spec.state_path).report(executor.run_id) is None
    assert [s for s in fake.list_steps(alloc.job_id) if s.name.startswith("fsm-lease.")] == []


def test_where_the_agent_cannot_take_it_the_run_goes_on_here_and_says_why(
        make_spec: SpecFactory) -> None:
    spec = make_spec()
    executor = Executor(spec, FakeCluster())
    executor.hand_over = lambda alloc: "the run's agent on n1 ended before it took the run over"
    report = executor.run()
    assert report.status.name == "PASSED", report.summary
    assert any("ended before it took the run over; the supervisor on this login node "
               "runs the job" in w for w in report.warnings), report.warnings


def test_letting_go_ends_srun_and_its_helper_at_once() -> None:
    """``LocalAgent.let_go``: ``srun`` (here a stand-in that, as srun does, has a helper
    child) and its helper end together, by SIGKILL to their process group: a helper
    left alone would cancel the step, a SIGTERM to srun would too."""
    from slurm_fsm.subprocess_backend import LocalAgent

    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300 & wait"],
                            start_new_session=True)
    with tempfile.TemporaryFile() as err:
        handle = LocalAgent(proc, "fsm-agent.r0123456789ab", err)
        until = time.monotonic() + 10
        while time.monotonic() < until and not _group(proc.pid)[1:]:
            time.sleep(0.02)
        assert len(_group(proc.pid)) == 2  # srun and its helper
        handle.let_go()
    assert proc.returncode == -9
    until = time.monotonic() + 10
    while time.monotonic() < until and _group(proc.pid):
        time.sleep(0.02)
    assert _group(proc.pid) == []


def _group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if int(stat[2]) == pgid and stat[0] != "Z":
                found.append(int(name))
    return sorted(found)


def test_the_agents_lease_is_named_apart_from_its_supervisors(tmp_path: Path) -> None:
    """The kill-point campaign (24.11, runs r8c5771be11fb and r3903b9cb3c26): the
    agent's lease was named as its supervisor's (same run, made in the same second). Its
    ``srun`` met a slurmctld restart and hung silent; the supervisor's step of that
    name was listed, so ``start_lease`` took it for its own slow step and waited the
    whole 60 s: ERROR. The agent's lease is now named apart from the lease its
    supervisor's record names (one second later: the same run, the same format)."""
    from slurm_fsm.lease import LeaseStep
    from slurm_fsm.supervise import Task, _backend

    theirs = "fsm-lease.r0123456789ab.1800000000"
    files = RunFiles(tmp_path / ".slurm_alloc.json")
    record = OwnerRecord.new("r0123456789ab", Owner.SUPERVISOR, mode="persistent",
                             spec_path="spec.json", spec={}, progress="")
    files.write_owner(attrs.evolve(record, allocation_id="5", lease=theirs))
    backend = _backend(Task(spec={}, backend="slurm"), "5",
                       state_path=files.paths.state, run_id="r0123456789ab")
    assert isinstance(backend, AgentBackend) and backend.supervisor_lease == theirs
    fake = FakeCluster()
    asked: list[str] = []
    fake.start_lease = lambda job_id, name, timeout_s=60.0: asked.append(name)  # type: ignore[method-assign,assignment,return-value]
    wrapped = AgentBackend.wrap(fake, "5", supervisor_lease=theirs)
    wrapped.start_lease("5", theirs)
    wrapped.start_lease("5", "fsm-lease.r0123456789ab.1800000007")
    assert asked[1] == "fsm-lease.r0123456789ab.1800000007"  # another name: as asked
    assert asked[0] != theirs
    step = LeaseStep.of(StepInfo(job_id="5", step_id="3", name=asked[0]))
    assert step is not None and step.run_id == "r0123456789ab"
    assert step.max_until == 1800000001
