"""One test per edge of design.md's table, on the fake cluster.

Each asserts the final state, the state file and the exact Slurm operations issued.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
from transitions import MachineError

from slurm_fsm.backend import AllocationRequest, StepResult
from slurm_fsm.errors import CommandTimedOut, ControllerUnreachable, NotOurJobError
from slurm_fsm.machine import ORPHAN_GRACE_S, AllocationMachine
from slurm_fsm.ownership import Ownership, ownership
from slurm_fsm.slurmcli import mount_warmup_argv
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState, StateStore
from slurm_fsm.step0.table import EDGES, Effect, State, repo_tag
from slurm_fsm.testing import FakeCluster
from slurm_fsm.testing.fake import CONTROLLER_OPS
from slurm_fsm_dev.docgen import states_markdown

from conftest import SpecFactory

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


def machine(spec: JobSpec, fake: FakeCluster, **kw: object) -> AllocationMachine:
    return AllocationMachine(spec, fake, clock=fake.clock, **kw)  # type: ignore[arg-type]


def slurm_ops(fake: FakeCluster) -> list[str]:
    """The controller operations issued, in order."""
    return [op for op in fake.ops() if op in CONTROLLER_OPS]


def ready_allocation(spec: JobSpec, fake: FakeCluster) -> AllocState:
    """Run step 0 once so that a Ready allocation and its state file exist."""
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    state = m.store.read()
    assert state is not None
    fake.reset_calls()
    return state


def state_file(spec: JobSpec) -> dict[str, object] | None:
    p = spec.state_path
    return json.loads(p.read_text()) if p.exists() else None


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster()


# ---------------------------------------------------------------- NoState edges (0A, 0C, 0D)


def test_release_with_state_file_cancels_our_job(make_spec: SpecFactory,
                                                 fake: FakeCluster) -> None:
    spec = make_spec()
    alloc = ready_allocation(spec, fake)
    spec.salloc_log.write_text("salloc: Granted job allocation\n")
    m = machine(make_spec(release_allocation=True), fake)
    assert m.prepare().state is State.Released
    assert m.path == ["NoState", "Released"]
    assert slurm_ops(fake) == ["query_job", "cancel"]
    assert fake.calls[-1].args == {"job_id": alloc.job_id, "step_id": None}
    assert fake.jobs[alloc.job_id].state == "CANCELLED"
    assert state_file(spec) is None and not spec.salloc_log.exists()
    assert m.history[-1].reason == f"Allocation {alloc.job_id} released."


def test_release_without_state_file_cancels_nothing_of_others(make_spec: SpecFactory,
                                                               fake: FakeCluster) -> None:
    spec = make_spec(release_allocation=True)
    theirs = fake.make_job(spec.job_name, fake.user, comment="slurm_fsm:repo=elsewhere")
    m = machine(spec, fake)
    assert m.prepare().state is State.Released
    assert slurm_ops(fake) == ["find_jobs"]  # one look for this checkout's tag
    assert theirs.state == "RUNNING"
    assert m.history[-1].reason == "no allocation to release"


@pytest.mark.parametrize("state_file", ["lost", "corrupt"])
def test_release_finds_this_checkouts_allocation_by_its_tag(
        make_spec: SpecFactory, fake: FakeCluster, state_file: str) -> None:
    """Issue 20 item 13 (the real-cluster test is in test_faults_round2_real.py)."""
    spec = make_spec(release_allocation=True)
    ours = fake.make_job("an-older-name", fake.user, comment=repo_tag(spec))
    if state_file == "corrupt":
        spec.state_path.parent.mkdir(parents=True)
        spec.state_path.write_text("{")
    m = machine(spec, fake)
    assert m.prepare().state is State.Released
    assert ours.state == "CANCELLED" and m.released_job_id == ours.job_id
    assert "found by this checkout's tag" in m.history[-1].reason
    assert not spec.state_path.exists()


def test_release_without_a_state_file_leaves_an_untagged_job_of_our_name(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """Issue 26 item 6: another checkout following the procedure by hand holds an
    untagged allocation of the procedure's job name; its own 0A cancels nothing
    without a state file, and neither does ours."""
    spec = make_spec(release_allocation=True)
    by_hand = fake.make_job(spec.job_name, fake.user)  # no comment: untagged
    m = machine(spec, fake)
    assert m.prepare().state is State.Released
    assert by_hand.state == "RUNNING" and "cancel" not in slurm_ops(fake)
    assert m.history[-1].reason == "no allocation to release"


@pytest.mark.parametrize(("name", "user"), [("acct-trtllm.persistent", "bob"),
                                            ("someone-elses-job", "tester")])
def test_release_refuses_a_job_that_is_not_ours(make_spec: SpecFactory, fake: FakeCluster,
                                                name: str, user: str) -> None:
    spec = make_spec(release_allocation=True)
    other = fake.make_job(name, user)
    spec.state_path.parent.mkdir(parents=True)
    spec.state_path.write_text(AllocState(job_id=other.job_id, nodelist="node01",
        partition="batch", account="acct", nodes=1).to_json())
    m = machine(spec, fake)
    assert m.prepare().state is State.Failed
    assert m.failure is not None and isinstance(m.failure.error, NotOurJobError)
    assert "refusing to cancel" in m.failure.message
    assert "cancel" not in slurm_ops(fake)
    assert other.state == "RUNNING"
    assert state_file(spec) is not None


def test_release_from_ready(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    job_id = m.alloc.job_id if m.alloc else ""
    fake.reset_calls()
    m.release()
    assert m.state is State.Released
    assert slurm_ops(fake) == ["query_job", "cancel"]
    assert fake.jobs[job_id].state == "CANCELLED"
    assert state_file(spec) is None


def test_start_with_state_file_goes_to_validating_without_slurm(make_spec: SpecFactory,
                                                                fake: FakeCluster) -> None:
    spec = make_spec()
    ready_allocation(spec, fake)
    m = machine(spec, fake)
    m.start()
    assert m.state is State.Validating
    assert slurm_ops(fake) == []


def test_start_without_state_file_goes_to_allocating(make_spec: SpecFactory,
                                                     fake: FakeCluster) -> None:
    m = machine(make_spec(), fake)
    m.start()
    assert m.state is State.Allocating
    assert slurm_ops(fake) == []


def test_corrupt_state_file_is_handled_like_a_missing_one(make_spec: SpecFactory,
                                                          fake: FakeCluster) -> None:
    spec = make_spec()
    orphan = ready_allocation(spec, fake)
    spec.state_path.write_text('{"job_id": "1')  # half-written
    fake.clock.advance(ORPHAN_GRACE_S)  # not a moment old: an orphan, not another run's
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Allocating", "Ready"]
    assert any("not valid JSON" in w for w in m.warnings)
    assert fake.jobs[orphan.job_id].state == "CANCELLED"  # 0D found it by name
    assert f"Released orphaned allocation {orphan.job_id} - state file was missing." in m.warnings
    new = state_file(spec)
    assert new is not None and new["job_id"] != orphan.job_id


# ---------------------------------------------------------------- Validating edges (0C, 0F)


def test_reuse_makes_exactly_one_job_query(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(docker_image=IMAGE, container_name="llama")
    before = ready_allocation(spec, fake)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Ready"]
    assert slurm_ops(fake) == ["query_job"]
    assert m.store.read() == before


def test_two_node_allocation_serves_one_node_request(make_spec: SpecFactory,
                                                     fake: FakeCluster) -> None:
    ready_allocation(make_spec(slurm_params={"nodes": 2}), fake)
    m = machine(make_spec(slurm_params={"nodes": 1}), fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Ready"]
    assert slurm_ops(fake) == ["query_job"]


def test_larger_request_is_incompatible(make_spec: SpecFactory, fake: FakeCluster) -> None:
    old = ready_allocation(make_spec(slurm_params={"nodes": 1}), fake)
    spec = make_spec(slurm_params={"nodes": 2})
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Incompatible", "Allocating", "Ready"]
    assert slurm_ops(fake) == ["query_job", "cancel", "find_jobs", "allocate", "query_job",
                              "granted"]
    assert fake.jobs[old.job_id].state == "CANCELLED"
    new = state_file(spec)
    assert new is not None and new["nodes"] == 2 and new["job_id"] != old.job_id


@pytest.mark.parametrize("change", [{"slurm_params": {"partition": "gpu"}},
                                    {"docker_image": "other:1", "container_name": "llama"}])
def test_other_partition_or_image_is_incompatible(make_spec: SpecFactory, change: dict[str, object],
                                                  ) -> None:
    fake = FakeCluster(partitions={"batch": ["a1", "a2"], "gpu": ["g1", "g2"]})
    ready_allocation(make_spec(docker_image=IMAGE, container_name="llama"), fake)
    m = machine(make_spec(**change), fake)
    assert m.prepare().state is State.Ready
    assert m.path[:4] == ["NoState", "Validating", "Incompatible", "Allocating"]


def test_completing_allocation_counts_as_gone(make_spec: SpecFactory,
                                              fake: FakeCluster) -> None:
    spec = make_spec()
    old = ready_allocation(spec, fake)
    fake.jobs[old.job_id].state = "COMPLETING"
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "NoState", "Allocating", "Ready"]
    assert "cancel" not in slurm_ops(fake)


def test_account_change_cancels_the_old_allocation(make_spec: SpecFactory) -> None:
    fake = FakeCluster(accounts=["acct", "acct2"])
    old = ready_allocation(make_spec(), fake)
    spec = make_spec(slurm_params={"account": "acct2"})
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Incompatible", "Allocating", "Ready"]
    assert fake.jobs[old.job_id].state == "CANCELLED"  # not leaked
    assert [j.name for j in fake.active_jobs()] == ["acct2-trtllm.persistent"]


def test_more_gpus_per_node_is_incompatible(make_spec: SpecFactory, fake: FakeCluster) -> None:
    ready_allocation(make_spec(), fake)
    m = machine(make_spec(slurm_params={"gpus_per_node": 8}), fake)
    assert m.prepare().state is State.Ready
    assert m.path[:3] == ["NoState", "Validating", "Incompatible"]
    ready = machine(make_spec(slurm_params={"gpus_per_node": 4}), fake)
    assert ready.prepare().state is State.Ready
    assert ready.path == ["NoState", "Validating", "Ready"]  # 8 serve a request for 4


def test_allocation_not_running_is_incompatible(make_spec: SpecFactory,
                                                fake: FakeCluster) -> None:
    spec = make_spec()
    old = ready_allocation(spec, fake)
    fake.jobs[old.job_id].state = "SUSPENDED"
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Incompatible", "Allocating", "Ready"]
    assert fake.jobs[old.job_id].state == "CANCELLED"


def test_expiring_allocation_is_cancelled_and_replaced(make_spec: SpecFactory,
                                                       fake: FakeCluster) -> None:
    spec = make_spec(alloc_time_limit="01:00:00")
    old = ready_allocation(spec, fake)
    fake.clock.advance(3600 - 300)  # exactly 5 minutes left
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Expiring", "Allocating", "Ready"]
    assert slurm_ops(fake) == ["query_job", "cancel", "find_jobs", "allocate", "query_job",
                              "granted"]
    assert any(w.startswith("Allocation expiring soon") for w in m.warnings)
    assert fake.jobs[old.job_id].state == "CANCELLED"
    new = state_file(spec)
    assert new is not None and new["job_id"] != old.job_id


def test_six_minutes_left_is_reused(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(alloc_time_limit="01:00:00")
    ready_allocation(spec, fake)
    fake.clock.advance(3600 - 360)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Ready"]


def test_job_gone_drops_state_file_then_allocates(make_spec: SpecFactory,
                                                  fake: FakeCluster) -> None:
    spec = make_spec()
    old = ready_allocation(spec, fake)
    fake.end_job(old.job_id)  # cancelled behind our back
    m = machine(spec, fake)
    m.start()
    m.advance()
    assert m.state is State.NoState
    assert state_file(spec) is None
    assert slurm_ops(fake) == ["query_job"]
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "NoState", "Allocating", "Ready"]


@pytest.mark.parametrize("error", [ControllerUnreachable("Unable to contact slurm controller"),
                                   CommandTimedOut(["squeue"], 30.0)])
def test_controller_unreachable_retries_then_fails_keeping_state(
        make_spec: SpecFactory, fake: FakeCluster, error: Exception) -> None:
    spec = make_spec()
    old = ready_allocation(spec, fake)
    fake.fail_next("query_job", error, times=10)
    m = machine(spec, fake, unreachable_retries=2)
    assert m.prepare().state is State.Failed
    assert m.path == ["NoState", "Validating", "Validating", "Validating", "Failed"]
    assert slurm_ops(fake) == ["query_job"] * 3
    assert m.failure is not None and "unreachable" in m.failure.message
    assert m.failure.state_file_kept
    assert state_file(spec) is not None
    assert fake.clock.slept and all(s > 0 for s in fake.clock.slept)
    # the controller comes back: the next run reuses the same allocation
    fake._faults.clear()
    again = machine(spec, fake)
    assert again.prepare().state is State.Ready
    assert again.alloc is not None and again.alloc.job_id == old.job_id


def test_controller_back_within_retries_reuses(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    ready_allocation(spec, fake)
    fake.fail_next("query_job", ControllerUnreachable("connect failure"), times=1)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Validating", "Ready"]


def test_pending_allocation_is_waited_for_not_cancelled(make_spec: SpecFactory,
                                                        fake: FakeCluster) -> None:
    spec = make_spec()
    old = ready_allocation(spec, fake)
    job = fake.jobs[old.job_id]
    job.state, job.pending_until = "PENDING", fake.clock.now() + 5
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path[:3] == ["NoState", "Validating", "Validating"]
    assert m.path[-1] == "Ready"
    assert "cancel" not in slurm_ops(fake)


def test_pending_too_long_fails_and_keeps_state(make_spec: SpecFactory,
                                                fake: FakeCluster) -> None:
    spec = make_spec()
    old = ready_allocation(spec, fake)
    job = fake.jobs[old.job_id]
    job.state, job.pending_until = "PENDING", fake.clock.now() + 10_000
    m = machine(spec, fake, pending_wait_s=60)
    assert m.prepare().state is State.Failed
    assert "cancel" not in slurm_ops(fake)
    assert m.failure is not None and "still PENDING" in m.failure.message
    assert state_file(spec) is not None


@pytest.mark.parametrize(("name", "user"), [("acct-trtllm.persistent", "bob"),
                                            ("interactive", "tester")])
def test_state_file_naming_another_job_is_dropped_never_cancelled(
        make_spec: SpecFactory, fake: FakeCluster, name: str, user: str) -> None:
    spec = make_spec()
    other = fake.make_job(name, user)
    spec.state_path.parent.mkdir(parents=True)
    spec.state_path.write_text(AllocState(job_id=other.job_id, nodelist="node01",
        partition="batch", account="acct", nodes=1).to_json())
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "NoState", "Allocating", "Ready"]
    assert other.state == "RUNNING"
    assert all(c.args.get("job_id") != other.job_id for c in fake.calls if c.op == "cancel")
    assert any("not ours" in w for w in m.warnings)


def test_container_switch_updates_only_container_name(make_spec: SpecFactory,
                                                      fake: FakeCluster) -> None:
    before = ready_allocation(make_spec(docker_image=IMAGE, container_name="llama"), fake)
    spec = make_spec(docker_image=IMAGE, container_name="mistral")
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Importing", "Installing", "Ready"]
    after = m.store.read()
    assert after is not None
    assert after == attrs.evolve(before, container_name="mistral")
    assert "allocate" not in slurm_ops(fake)
    assert "mistral" in fake.nodes["node01"].containers


def test_unfinished_install_is_redone_on_reuse(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(docker_image=IMAGE, container_name="llama")
    fake.on_step("requirements-dev.txt", StepResult(1, "", "ERROR: no such file"), times=1)
    first = machine(spec, fake)
    assert first.prepare().state is State.Failed
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Installing", "Ready"]
    s = state_file(spec)
    assert s is not None and s["installed"] is True


# ------------------------------------------------- Allocating / Importing / Installing


def test_allocation_with_image_imports_warms_checks_installs(make_spec: SpecFactory,
                                                             fake: FakeCluster) -> None:
    spec = make_spec(docker_image=IMAGE, container_name="llama",
                     container_mounts="/data:/data,/home:/workspace:ro",
                     slurm_params={"nodes": 2, "gpus_per_node": 1})
    fake.add_gpu_process("node02", 4242, "python", "30000 MiB")
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Allocating", "Importing", "Installing", "Ready"]
    assert slurm_ops(fake) == ["find_jobs", "allocate", "query_job", "granted", "run_step",
                               "run_step", "gpu_processes", "run_step", "run_step"]
    steps = [c.args["request"] for c in fake.calls if c.op == "run_step"]
    assert steps[0].argv == ("true",) and steps[0].container.image == IMAGE
    assert steps[0].container.name == "llama" and steps[0].nodes == 2
    # one warm-up step for both mounts (procedure.md 0E.2: one ls loop)
    assert steps[1].argv == mount_warmup_argv(["/data", "/workspace"])
    assert steps[1].nodes == 2
    assert all(s.container.image is None for s in steps[1:])
    assert steps[2].argv == ("pip", "install", "-e", ".") and steps[2].container.writable
    assert steps[3].argv == ("pip", "install", "-r", "requirements-dev.txt")
    assert all(s.ntasks_per_node == 1 for s in steps)
    assert ("GPU processes found on node02: 4242 python (30000 MiB). "
            "These may interfere with the job.") in m.warnings
    s = state_file(spec)
    assert s is not None
    assert s["installed"] is True and s["container_name"] == "llama"
    assert s["nodelist"] == "node[01-02]" and s["nodes"] == 2
    assert s["container_mounts"] == "/data:/data,/home:/workspace:ro"
    assert len(fake.nodes["node01"].containers["llama"].packages) == 2


def test_eval_requirements_installed_when_present(make_spec: SpecFactory,
                                                  fake: FakeCluster) -> None:
    spec = make_spec(docker_image=IMAGE, container_name="llama")
    req = spec.repo_root / "examples" / "trtllm-eval" / "requirements.txt"
    req.parent.mkdir(parents=True)
    req.write_text("lm_eval\n")
    machine(spec, fake).prepare()
    argvs = [c.args["request"].argv for c in fake.calls if c.op == "run_step"]
    assert argvs[-1] == ("pip", "install", "-r", "examples/trtllm-eval/requirements.txt")


def test_allocation_without_image_skips_container_steps(make_spec: SpecFactory,
                                                        fake: FakeCluster) -> None:
    spec = make_spec()
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Allocating", "Ready"]
    assert slurm_ops(fake) == ["find_jobs", "allocate", "query_job",
                              "granted"]
    assert any("import, mount warm-up and install skipped" in n for n in m.notes)
    s = state_file(spec)
    assert s is not None and s["installed"] is True and s["container_name"] is None


def test_skip_install_for_custom(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(workflow_type="custom", skip_install=True, docker_image=IMAGE,
                     container_name="c")
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Allocating", "Importing", "Ready"]
    assert not any(c.args["request"].argv[0] == "pip" for c in fake.calls if c.op == "run_step")


def test_skip_install_is_ignored_for_pytest(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(workflow_type="pytest", skip_install=True, docker_image=IMAGE,
                     container_name="c")
    assert machine(spec, fake).prepare().state is State.Ready
    assert any(c.args["request"].argv[0] == "pip" for c in fake.calls if c.op == "run_step")


@pytest.mark.parametrize(("partition", "account", "message"), [
    ("nope", "acct", "Invalid partition name specified"),
    ("batch", "bad", "Invalid account or account/partition combination specified"),
])
def test_salloc_failure_reports_slurms_message_and_leaves_nothing(
        make_spec: SpecFactory, fake: FakeCluster, partition: str, account: str,
        message: str) -> None:
    spec = make_spec(slurm_params={"partition": partition, "account": account})
    m = machine(spec, fake)
    assert m.prepare().state is State.Failed
    assert m.failure is not None and m.failure.step == "Allocating"
    assert message in m.failure.message
    assert state_file(spec) is None
    assert fake.active_jobs() == []
    assert message in spec.salloc_log.read_text()


def test_pending_new_allocation_is_polled_until_running(make_spec: SpecFactory) -> None:
    fake = FakeCluster(pending_s=30)
    m = machine(make_spec(), fake)
    assert m.prepare().state is State.Ready
    assert fake.count("query_job") > 2
    assert fake.clock.slept[0] < 1 and max(fake.clock.slept) <= 10


def test_run_interrupted_while_pending_leaves_a_tracked_allocation(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster(pending_s=30)

    class CtrlC:
        def now(self) -> float:
            return fake.clock.now()

        def sleep(self, seconds: float) -> None:
            raise KeyboardInterrupt

    spec = make_spec()
    with pytest.raises(KeyboardInterrupt):
        AllocationMachine(spec, fake, clock=CtrlC()).prepare()
    s = state_file(spec)
    assert s is not None and s["nodelist"] == "" and s["installed"] is False
    job = fake.jobs[str(s["job_id"])]
    assert job.state == "PENDING"  # tracked, not leaked, not cancelled
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path[:3] == ["NoState", "Validating", "Validating"]
    assert "allocate" not in fake.ops()[-5:] and fake.count("allocate") == 1
    again = state_file(spec)
    assert again is not None and again["job_id"] == s["job_id"]
    assert again["nodelist"] == "node01"
    assert m.history[-1].reason.endswith("nodelist completed")  # the effect did something
    reused = machine(spec, fake)
    assert reused.prepare().state is State.Ready
    # the same edge again: the nodelist is complete, so the history does not claim it
    assert reused.history[-1].edge == m.history[-1].edge
    assert "nodelist completed" not in reused.history[-1].reason


def test_validation_of_a_pending_allocation_backs_off(make_spec: SpecFactory,
                                                      fake: FakeCluster) -> None:
    spec = make_spec()
    old = ready_allocation(spec, fake)
    job = fake.jobs[old.job_id]
    job.state, job.pending_until = "PENDING", fake.clock.now() + 10_000
    m = machine(spec, fake, pending_wait_s=600)
    assert m.prepare().state is State.Failed
    assert fake.count("query_job") < 80  # not one squeue every 0.5 s for 10 minutes
    assert max(fake.clock.slept) == 10.0


def test_allocation_pending_forever_is_cancelled(make_spec: SpecFactory) -> None:
    fake = FakeCluster(pending_s=100_000)
    m = machine(make_spec(), fake, alloc_wait_s=120)
    assert m.prepare().state is State.Failed
    assert m.failure is not None and "still PENDING" in m.failure.message
    assert fake.active_jobs() == []
    assert state_file(make_spec()) is None


def test_no_pyxis_fails_before_allocating(make_spec: SpecFactory) -> None:
    fake = FakeCluster(pyxis=False)
    m = machine(make_spec(docker_image=IMAGE, container_name="c"), fake)
    assert m.prepare().state is State.Failed
    assert m.failure is not None and "no pyxis" in m.failure.message
    assert "allocate" not in fake.ops()


def test_orphans_of_this_user_and_name_only_are_cancelled(make_spec: SpecFactory,
                                                          fake: FakeCluster) -> None:
    mine = fake.make_job("acct-trtllm.persistent", "tester")
    others = [fake.make_job("acct-trtllm.persistent", "bob"),
              fake.make_job("interactive", "tester")]
    m = machine(make_spec(), fake)
    assert m.prepare().state is State.Ready
    assert mine.state == "CANCELLED"
    assert all(o.state == "RUNNING" for o in others)
    assert f"Released orphaned allocation {mine.job_id} - state file was missing." in m.warnings


def test_another_checkouts_allocation_is_not_an_orphan(tmp_path: Path,
                                                       make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    mine = make_spec()
    other = attrs.evolve(mine, repo_root=tmp_path / "other-checkout")
    theirs = machine(other, fake)
    assert theirs.prepare().state is State.Ready
    their_job = theirs.alloc.job_id if theirs.alloc else ""
    m = machine(mine, fake)
    assert m.prepare().state is State.Ready
    assert fake.jobs[their_job].state == "RUNNING"  # left alone
    assert any("belongs to another checkout" in n for n in m.notes)
    assert m.alloc is not None and m.alloc.job_id != their_job
    salloc = [c.args["request"] for c in fake.calls if c.op == "allocate"]
    assert salloc[-1].comment == repo_tag(mine) != repo_tag(other)


@pytest.mark.parametrize(("match", "what"), [
    ("true", "container import"),
    ("for d in /data", "mount warm-up of /data"),  # the step itself failed (srun, pyxis)
    ("pip install -e .", "pip install -e ."),
])
def test_setup_step_failures_get_their_own_report(make_spec: SpecFactory, fake: FakeCluster,
                                                  match: str, what: str) -> None:
    spec = make_spec(docker_image=IMAGE, container_name="llama", container_mounts="/data:/data")
    fake.on_step(match, StepResult(1, "", f"boom in {match}"), times=1)
    m = machine(spec, fake)
    assert m.prepare().state is State.Failed
    assert m.failure is not None
    assert what in m.failure.message and f"boom in {match}" in m.failure.message
    s = state_file(spec)
    assert s is not None  # the allocation exists and is tracked, never leaked
    assert s["installed"] is False
    expected_container = "llama" if match.startswith("pip") else None
    assert s["container_name"] == expected_container


def test_mount_warm_up_is_one_ls_loop_whose_failures_are_ignored(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """procedure.md 0E.2: one loop over the container-side targets, each ``ls``'s
    failure ignored: a target that cannot be listed is a warning, not an ERROR."""
    spec = make_spec(docker_image=IMAGE, container_name="llama",
                     container_mounts="/data:/data,/models:/models")
    fake.on_step("for d in", StepResult(0, "", "ls: /models: No such file or directory"),
                 times=1)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    warm = [c.args["request"].argv for c in fake.calls
            if c.op == "run_step" and "for d in" in " ".join(c.args["request"].argv)]
    assert warm == [("sh", "-c", 'for d in /data /models; do ls "$d" > /dev/null || true; '
                     "done")]  # one srun for both mounts
    assert any("mount warm-up" in w and "No such file" in w for w in m.warnings)


def test_the_warm_up_loop_ignores_a_failing_ls_in_a_real_shell(tmp_path: Path) -> None:
    """The argv itself, run by sh: a missing target does not fail it, and the others
    are still listed."""
    (tmp_path / "here it's").mkdir()
    argv = mount_warmup_argv([str(tmp_path / "missing"), str(tmp_path / "here it's")])
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 0
    assert "missing" in done.stderr


# ---------------------------------------------------------------- Ready / Running


def test_no_gpus_asked_means_no_gpu_preflight_srun(make_spec: SpecFactory,
                                                   fake: FakeCluster) -> None:
    """A job that asks no GPU has none to judge: no nvidia-smi step at all."""
    spec = make_spec(slurm_params={"gpus_per_node": 0})
    ready_allocation(spec, fake)
    fake.add_gpu_process("node01", 77, "stale")
    m = machine(spec, fake)
    m.prepare()
    m.run()
    assert m.state is State.Running
    assert slurm_ops(fake) == ["query_job"]
    assert not any("GPU processes" in w for w in m.warnings)


def test_run_preflight_reuses_validation_and_warns(make_spec: SpecFactory,
                                                   fake: FakeCluster) -> None:
    # admitted (it expects 1 minute) but its time limit is longer than the time left
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=60,
                     slurm_params={"time_limit": "00:50:00", "gpus_per_node": 1})
    ready_allocation(spec, fake)
    fake.clock.advance(20 * 60)
    fake.add_gpu_process("node01", 77, "stale")
    m = machine(spec, fake)
    m.prepare()
    m.run()
    assert m.state is State.Running
    assert slurm_ops(fake) == ["query_job", "gpu_processes"]
    assert any(w.startswith("Allocation has 00:40:00 left but job expects 00:50:00")
               for w in m.warnings)
    assert any("GPU processes found on node01: 77 stale" in w for w in m.warnings)
    m.finish(reason="exit 0")
    assert m.state is State.Ready
    assert m.history[-1].reason == "exit 0"


def test_illegal_trigger_raises_and_keeps_state(make_spec: SpecFactory, fake: FakeCluster) -> None:
    m = machine(make_spec(), fake)
    with pytest.raises(MachineError):
        m.run()
    assert m.state is State.NoState
    assert not m.may_run() and m.may_start()
    m.start()
    with pytest.raises(MachineError):
        m.finish()
    assert m.state is State.Allocating
    assert fake.calls == []


def test_history_has_timestamps_and_reasons(make_spec: SpecFactory, fake: FakeCluster) -> None:
    m = machine(make_spec(), fake)
    m.prepare()
    assert [(t.source, t.dest, t.trigger) for t in m.history] == [
        ("NoState", "Allocating", "start"), ("Allocating", "Ready", "advance")]
    assert all(t.at.endswith("+00:00") and t.reason for t in m.history)


def test_every_state_of_the_design_card_exists() -> None:
    names = {s.value for s in State}
    assert {"NoState", "Validating", "Expiring", "Incompatible", "Allocating", "Importing",
            "Installing", "Ready", "Running", "Released"} <= names
    used = {e.dest for e in EDGES} | {e.source for e in EDGES if isinstance(e.source, State)}
    assert used == set(State)


def test_diagram_in_docs_is_current() -> None:
    doc = Path(__file__).parent.parent / "docs" / "states.md"
    assert doc.read_text() == states_markdown(), "docs/states.md is stale: run `make diagram`"
    # one drawing per part (issue 41 item 6), together the whole machine
    from slurm_fsm.step0.table import DiagramPart, mermaid_diagram

    assert all(mermaid_diagram(EDGES, part=p).rstrip("\n") in doc.read_text()
               for p in DiagramPart)


# ------------------------------------------------- the table decides; the machine acts


def _scenario(kind: str, spec: JobSpec, fake: FakeCluster) -> None:
    """Bring the state file's allocation into ``kind`` before Validating's query."""
    alloc = ready_allocation(spec, fake)
    job = fake.jobs[alloc.job_id]
    if kind == "gone":
        fake.end_job(alloc.job_id)
    elif kind == "pending":
        job.state, job.pending_until = "PENDING", fake.clock.now() + 10_000
    elif kind == "unreachable":
        fake.fail_next("query_job", ControllerUnreachable("connect failure"), times=1)
    elif kind == "not ours":
        job.user = "bob"


@pytest.mark.parametrize("kind", ["gone", "pending", "unreachable", "not ours", "running"])
@pytest.mark.parametrize("first", range(sum(1 for e in EDGES if e.source is State.Validating)))
def test_effects_follow_the_chosen_edge_whatever_the_order(
        make_spec: SpecFactory, fake: FakeCluster, monkeypatch: pytest.MonkeyPatch,
        kind: str, first: int) -> None:
    """Put any Validating edge first: the machine takes it, and what happens to the state
    file and the failure is that edge's effects, never another branch's."""
    validating = [e for e in EDGES if e.source is State.Validating]
    moved = validating[first]
    reordered = (moved, *(e for e in EDGES if e is not moved))
    spec = make_spec()
    _scenario(kind, spec, fake)
    monkeypatch.setattr("slurm_fsm.machine.EDGES", reordered)
    m = machine(spec, fake, unreachable_retries=0, pending_wait_s=0)
    m.start()
    m.advance()
    taken = m.history[-1].edge
    assert taken is not None
    if moved.holds(m.observation, spec):
        assert taken is moved
    assert m.state is taken.dest
    dropped = Effect.DROP_STATE_FILE in taken.effects
    assert spec.state_path.exists() is not dropped, (kind, taken)
    assert (m.failure is not None) is (Effect.RECORD_FAILURE in taken.effects)
    assert "cancel" not in slurm_ops(fake)


@pytest.mark.parametrize("image", [None, IMAGE])
def test_may_and_possible_edges_make_no_slurm_call(make_spec: SpecFactory, fake: FakeCluster,
                                                   image: str | None) -> None:
    spec = make_spec(docker_image=image, container_name="c" if image else None)
    m = machine(spec, fake)
    m.start()
    assert m.state is State.Allocating
    before = list(fake.calls)
    assert m.may_advance() and not m.may_run() and not m.may_start()
    edges = m.possible_edges()
    assert fake.calls == before  # no salloc, no squeue, nothing
    assert m.state is State.Allocating
    assert [(p.edge.dest, p.chosen) for p in edges] == [
        (State.Importing, image is not None), (State.Ready, image is None)]
    m.advance()
    assert fake.count("allocate") == 1
    # Validating: may_advance and possible_edges ask nothing either
    assert m.prepare().state is State.Ready
    m2 = machine(spec, fake)
    m2.start()
    fake.reset_calls()
    assert m2.may_advance() and m2.may_release() is False
    assert [str(p) for p in m2.possible_edges("advance")]
    assert fake.calls == []
    m2.advance()
    assert fake.count("query_job") == 1 and m2.state is State.Ready
    assert fake.count("allocate") == 0


def test_possible_edges_judge_the_last_observation(make_spec: SpecFactory,
                                                   fake: FakeCluster) -> None:
    spec = make_spec()
    ready_allocation(spec, fake)
    fake.fail_next("query_job", ControllerUnreachable("connect failure"), times=1)
    m = machine(spec, fake, unreachable_retries=1)
    m.start()
    # the observation is start's (the state file): advance will ask Slurm first
    assert all(p.stale for p in m.possible_edges())
    m.advance()
    assert m.state is State.Validating and m.observation.unreachable
    assert m.observation.retries_left == 1
    chosen = [p for p in m.possible_edges() if p.chosen]
    assert len(chosen) == 1 and chosen[0].edge is m.history[-1].edge
    assert not chosen[0].stale
    assert chosen[0].checks == (("controller_unreachable", True), ("retries_left", True))
    assert m.triggers() == ["advance"]
    assert "=> advance: Validating -> Validating" in str(chosen[0])
    with pytest.raises(ValueError, match="unknown trigger"):
        m.may("advanc")


def test_observation_is_frozen(make_spec: SpecFactory, fake: FakeCluster) -> None:
    m = machine(make_spec(), fake)
    m.start()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        m.observation.gone = True  # type: ignore[misc]


def test_the_machine_shows_its_diagram_with_the_current_state(make_spec: SpecFactory,
                                                              fake: FakeCluster) -> None:
    m = machine(make_spec(), fake)
    m.start()
    md = m._repr_markdown_()
    assert md.count("```mermaid") == 1 and "stateDiagram-v2" in md
    assert "class Allocating current" in md and "class NoState current" not in md
    m.advance()
    assert "class Ready current" in m.diagram()


def test_history_is_stamped_by_the_injected_clock(make_spec: SpecFactory,
                                                  fake: FakeCluster) -> None:
    m = machine(make_spec(), fake)
    m.start()
    fake.clock.advance(123.0)
    m.advance()
    first, second = m.history
    assert first.clock == fake.clock.now() - 123.0 - sum(fake.clock.slept)
    assert second.clock == fake.clock.now()
    assert second.edge is not None and second.edge.dest is State.Ready


def test_hand_stepping_takes_the_state_file_lock(make_spec: SpecFactory,
                                                 fake: FakeCluster) -> None:
    from slurm_fsm.state import StateLockTimeout, StateStore

    spec = make_spec()
    other = StateStore(spec.state_path)  # another orchestrator on this repo_root
    m = machine(spec, fake, store=StateStore(spec.state_path, lock_timeout_s=0.2))
    with other.locked(), pytest.raises(StateLockTimeout):
        m.start()
    assert m.state is State.NoState and fake.calls == []
    m.start()  # free again
    assert m.state is State.Allocating


def test_no_process_wide_logging_filter_and_no_binding_warnings(
        make_spec: SpecFactory, fake: FakeCluster, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    assert logging.getLogger("transitions.core").filters == []
    with caplog.at_level(logging.DEBUG, logger="transitions"):
        machine(make_spec(), fake).prepare()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ------------------------------------------------ issue 26 item 2: the lock is step 0's
LOCK_HOLDER = (
    "import sys, filelock\n"
    "lock = filelock.FileLock(sys.argv[1]); lock.acquire(); print('held', flush=True)\n"
    "sys.stdin.read(); lock.release()\n"
)


def _hold_lock(path: Path) -> subprocess.Popen[str]:
    """Another process takes ``path`` (a run's step 0, a waiting release) and keeps it
    until its stdin is closed."""
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("allocation_gone", [False, True])
def test_the_pre_flight_and_the_end_of_a_job_never_take_the_lock(
        make_spec: SpecFactory, fake: FakeCluster, allocation_gone: bool) -> None:
    """Another process holds the state file's lock (a 1 s timeout here: waiting for it
    would raise StateLockTimeout): ``run`` and ``finish`` go through anyway; a gone
    allocation's state file is left for the next validation instead of waited for."""
    spec = make_spec()
    store = StateStore(spec.state_path, lock_timeout_s=1.0)
    m = machine(spec, fake, store=store)
    assert m.prepare().state is State.Ready
    holder = _hold_lock(store.lock_path)
    try:
        assert m.run() and m.state is State.Running
        m.finish(reason="job finished", allocation_gone=allocation_gone)
        assert m.state is (State.Gone if allocation_gone else State.Ready), m.failure
    finally:
        holder.communicate(input="", timeout=30)
    assert spec.state_path.exists()  # the lock was another's: the file is left
    if allocation_gone:
        assert any("left for the next run's validation" in n for n in m.notes)


def test_a_gone_allocations_file_is_dropped_only_when_it_still_names_it(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """The job's end drops the state file of its gone allocation only when the file
    still names it: another run may have written its new allocation there."""
    spec = make_spec()
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready and m.run()
    assert m.alloc is not None
    newer = attrs.evolve(m.alloc, job_id="999")
    m.store.write(newer)
    m.finish(reason="allocation ended", allocation_gone=True)
    assert m.state is State.Gone
    assert m.store.read() == newer
    m2 = machine(spec, fake)
    assert m2.prepare().state is not State.Failed and m2.run()
    m2.finish(reason="allocation ended", allocation_gone=True)
    assert not spec.state_path.exists()


def test_a_run_that_holds_a_lease_never_waits_for_the_lock(
        make_spec: SpecFactory, fake: FakeCluster, tmp_path: Path) -> None:
    """A release holds the lock while it waits for the leases: a lease holder that
    waited for the lock would wait for itself. The machine refuses (a bug, loudly)."""
    from slurm_fsm.lease import LeaseGate
    from slurm_fsm.runrecord import RunBook

    spec = make_spec()
    gate = LeaseGate(RunBook(spec.state_path), wait_s=0)
    m = machine(spec, fake, leases=gate)
    assert m.prepare().state is State.Ready
    gate.own = "r0123456789ab"
    with pytest.raises(RuntimeError, match="never waits"):
        m.release()  # a trigger of step 0, once the run holds its lease
    with pytest.raises(RuntimeError, match="never waits"), m.locked():
        pass
    assert m.state is State.Ready and m.run()  # the pre-flight: no lock


class _AdoptingCluster(FakeCluster):
    """As ``SubprocessBackend.allocate``: a live allocation of this checkout's tag and
    name is returned as it is (never two allocations)."""

    def allocate(self, request: AllocationRequest, wait_s: float = 10.0) -> str:
        for job in self.jobs.values():
            if job.kind == "alloc" and job.active and job.name == request.job_name \
                    and ownership(self._info(job), user=self.user, tag=request.comment or "",
                                  names=()) is Ownership.TAGGED:
                return job.job_id
        return super().allocate(request, wait_s)


def test_a_lost_state_file_never_adopts_an_allocation_too_small_for_the_job(
        make_spec: SpecFactory) -> None:
    """Issue 26 item 6: the state file lost while jobs run, the next run (2 nodes)
    adopted the 1-node allocation those jobs use, ran on it and PASSED, and the warning
    blamed Slurm's grant. Now it is not used: Failed, saying why; the state file names
    it again (the next run replaces it once its jobs end); it is never cancelled."""
    from slurm_fsm.lease import LeaseGate
    from slurm_fsm.runrecord import RunBook

    fake = _AdoptingCluster()
    small = ready_allocation(make_spec(slurm_params={"nodes": 1}), fake)
    spec = make_spec(slurm_params={"nodes": 2})
    book = RunBook(spec.state_path)
    book.start(small.job_id)  # a running job of this checkout (this process: alive)
    spec.state_path.unlink()  # lost
    m = machine(spec, fake, leases=LeaseGate(book, wait_s=0))
    assert m.prepare().state is State.Failed
    assert m.failure is not None and "smaller than this job needs" in m.failure.message
    assert "Slurm granted" not in " ".join(m.warnings)
    assert fake.jobs[small.job_id].state == "RUNNING"
    assert (state_file(spec) or {}).get("job_id") == small.job_id
