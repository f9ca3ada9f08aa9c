"""The size of the persistent allocation (issue 17 items 6-7, issue 18): what Slurm
granted (parsed from real ``scontrol show job`` text, tests/data/granted/), what salloc
asks for, and whether an allocation can hold a job. Against the fake for the machine."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from slurm_fsm.allocation import Allocation
from slurm_fsm.backend import Granted
from slurm_fsm.capacity import (
    NodeCpus,
    allocation_request_size,
    capacity_problems,
    job_needs,
    with_grant,
)
from slurm_fsm.errors import JobNotFound, SpecError
from slurm_fsm.executor import Executor
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.results import Status
from slurm_fsm.slurmcli import classify, parse_scontrol_granted, salloc_argv, scontrol_granted_argv
from slurm_fsm.state import AllocState
from slurm_fsm.step0.table import State, incompatibilities
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

pytestmark = pytest.mark.usefixtures("golden_reports")

DATA = Path(__file__).parent / "data" / "granted"
EXPECTED = json.loads((DATA / "expected.json").read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_recorded_grant_parses_to_its_expected_value(name: str) -> None:
    text = (DATA / f"{name}.stdout").read_text()
    want = EXPECTED[name]
    assert attrs.asdict(parse_scontrol_granted(text, want["job_id"])) == want


def test_every_recording_has_an_expected_value() -> None:
    assert sorted(p.stem for p in DATA.glob("*.stdout")) == sorted(EXPECTED)


def test_the_shrunk_request_is_what_the_recording_shows() -> None:
    assert "setting nnodes to 1" in (DATA / "salloc_2nodes_1task.log").read_text()
    assert parse_scontrol_granted(
        (DATA / "scontrol_d_o_2nodes_1task.stdout").read_text(), "4").nodes == 1


def test_another_jobs_record_or_a_pending_one_is_refused() -> None:
    text = (DATA / "scontrol_d_o_2nodes_tpn2.stdout").read_text()
    with pytest.raises(JobNotFound):
        parse_scontrol_granted(text, "55")
    pending = "JobId=9 JobName=x JobState=PENDING NodeList=(null) NumNodes=2 NumCPUs=2"
    with pytest.raises(ValueError, match="not running yet"):
        parse_scontrol_granted(pending, "9")


def test_the_granted_query_is_one_job_query_with_its_id() -> None:
    argv = scontrol_granted_argv("12")
    assert argv == ["scontrol", "show", "job", "-d", "-o", "12"]
    err = classify(argv, 1, "", "slurm_load_jobs error: Invalid job id specified")
    assert isinstance(err, JobNotFound) and err.job_id == "12"


# ------------------------------------------------------------------ what is asked


def test_nodes_without_tasks_per_node_ask_tasks_per_node_never_ntasks(
        make_spec: SpecFactory) -> None:
    spec = make_spec(slurm_params={"nodes": 2, "ntasks": 1})
    size = allocation_request_size(spec)
    assert (size.nodes, size.ntasks_per_node, size.gpus_per_node) == (2, 1, None)
    argv = salloc_argv(_request(size))
    assert "--nodes=2" in argv and "--ntasks-per-node=1" in argv
    assert not any(a.startswith("--ntasks=") for a in argv)


def test_the_allocation_holds_one_task_per_gpu(make_spec: SpecFactory) -> None:
    spec = make_spec(slurm_params={"gpus_per_node": 4})  # a 1-task pytest job on 4 GPUs
    size = allocation_request_size(spec)
    assert (size.nodes, size.ntasks_per_node, size.gpus_per_node) == (1, 4, 4)
    assert "--gpus-per-node=4" in salloc_argv(_request(size))


def test_alloc_nodes_and_gpus_make_a_bigger_allocation(make_spec: SpecFactory) -> None:
    spec = make_spec(slurm_params={"nodes": 1, "gpus_per_node": 1, "ntasks_per_node": 1},
                     alloc_nodes=2, alloc_gpus_per_node=8)
    size = allocation_request_size(spec)
    assert (size.nodes, size.ntasks_per_node, size.gpus_per_node) == (2, 8, 8)
    assert job_needs(spec).nodes == 1


def test_no_gpus_asked_no_gpu_option(make_spec: SpecFactory) -> None:
    for params in ({}, {"gpus_per_node": 0}):
        size = allocation_request_size(make_spec(slurm_params=params))
        assert size.gpus_per_node is None
        assert not any("gpus" in a for a in salloc_argv(_request(size)))


@pytest.mark.parametrize(("field", "value", "params", "message"), [
    ("alloc_nodes", 1, {"nodes": 2},
     "alloc_nodes: must be >= slurm_params.nodes (2): the allocation must hold the job, "
     "got 1"),
    ("alloc_gpus_per_node", 2, {"gpus_per_node": 4},
     "alloc_gpus_per_node: must be >= slurm_params.gpus_per_node (4): the allocation must "
     "hold the job, got 2"),
    ("alloc_nodes", 0, {}, "alloc_nodes: must be >= 1, got 0"),
    ("alloc_gpus_per_node", "eight", {}, "alloc_gpus_per_node: "),
])
def test_an_allocation_smaller_than_the_job_is_refused_by_name(
        make_spec: SpecFactory, field: str, value: object, params: dict[str, int],
        message: str) -> None:
    with pytest.raises(SpecError) as err:
        make_spec(slurm_params=params, **{field: value})
    assert any(p.startswith(message) for p in err.value.problems), err.value.problems


# ------------------------------------------------------------- what it can hold


def _alloc(**kw: object) -> AllocState:
    base: dict[str, object] = dict(job_id="7", nodelist="node01", partition="batch",
                                   account="acct", nodes=1, cpus_per_node=1, gpus_per_node=0)
    base.update(kw)
    return AllocState(**base)  # type: ignore[arg-type]


def test_a_one_task_allocation_cannot_hold_one_task_per_gpu(make_spec: SpecFactory) -> None:
    """17.7: the pytest spec's allocation (1 CPU) and the eval spec (4 ranks, 4 GPUs)."""
    alloc = _alloc(cpus_per_node=1, gpus_per_node=4)
    eval_spec = make_spec(workflow_type="eval",
                          slurm_params={"gpus_per_node": 4, "ntasks_per_node": 4})
    assert capacity_problems(alloc, eval_spec) == [
        "4 task(s) per node need 4 CPU(s) per node, the allocation has 1 (as granted by "
        "Slurm)"]
    assert incompatibilities(alloc, eval_spec) == capacity_problems(alloc, eval_spec)
    assert capacity_problems(attrs.evolve(alloc, cpus_per_node=4), eval_spec) == []


def test_nodes_and_gpus_are_judged_as_granted(make_spec: SpecFactory) -> None:
    spec = make_spec(slurm_params={"nodes": 2, "gpus_per_node": 8, "ntasks": 2})
    problems = capacity_problems(_alloc(nodes=1, gpus_per_node=4), spec)
    assert problems == [
        "nodes 2 is more than the allocation's 1 (as granted by Slurm)",
        "gpus_per_node 8 is more than the allocation's 4 (as granted by Slurm)"]


def test_an_old_state_file_is_not_judged_on_cpus(make_spec: SpecFactory) -> None:
    spec = make_spec(slurm_params={"ntasks_per_node": 8})
    assert capacity_problems(_alloc(cpus_per_node=None), spec) == []


def test_with_grant_takes_what_slurm_granted_not_the_request() -> None:
    asked = _alloc(nodes=2, gpus_per_node=8, cpus_per_node=None, nodelist="")
    grant = Granted(job_id="7", nodes=1, nodelist="node01", cpus=3, cpus_per_node=3,
                    gpus_per_node=4)
    got = with_grant(asked, grant)
    assert (got.nodes, got.nodelist, got.cpus_per_node, got.gpus_per_node) == (
        1, "node01", 3, 4)


# ----------------------------------------------------------------- the machine


def test_more_nodes_than_tasks_records_and_keeps_both_nodes(
        make_spec: SpecFactory) -> None:
    """17.6 on the fake (which shrinks ``--nodes=2 --ntasks=1`` as salloc does)."""
    fake = FakeCluster()
    spec = make_spec(slurm_params={"nodes": 2, "ntasks": 1})
    for _ in range(2):
        report = Executor(spec, fake, clock=fake.clock).run()  # type: ignore[arg-type]
        assert report.status is Status.PASSED, report.render_text()
    state = json.loads(spec.state_path.read_text())
    job = fake.jobs[state["job_id"]]
    assert state["nodes"] == job.num_nodes == 2
    assert state["cpus_per_node"] == 1
    assert fake.count("allocate") == 1


def test_the_state_file_holds_the_grant_when_slurm_gives_less(
        make_spec: SpecFactory) -> None:
    """Whatever was asked, the state file says what Slurm granted (here the fake grants
    one node of two, as salloc does for ``--ntasks=1``), and the run says so."""
    fake = FakeCluster()
    spec = make_spec(slurm_params={"nodes": 2, "ntasks": 1})
    original = fake.allocate

    def shrinking(request, wait_s=10.0):  # type: ignore[no-untyped-def]
        return original(attrs.evolve(request, ntasks=1), wait_s)

    fake.allocate = shrinking  # type: ignore[method-assign]
    m = AllocationMachine(spec, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert m.prepare().state is State.Ready
    state = json.loads(spec.state_path.read_text())
    assert state["nodes"] == 1
    assert any("less than the job needs: nodes 2 is more than the allocation's 1" in w
               for w in m.warnings)


def test_an_old_state_file_is_completed_with_the_grant_before_reuse(
        make_spec: SpecFactory) -> None:
    """A state file of an earlier version (no cpus_per_node, nodes as asked) is read,
    completed with what Slurm granted, judged on it and saved."""
    fake = FakeCluster()
    one = make_spec()
    assert Executor(one, fake, clock=fake.clock).run().status is Status.PASSED  # type: ignore[arg-type]
    data = json.loads(one.state_path.read_text())
    del data["cpus_per_node"]
    data["nodes"] = 2  # the request, not the grant
    one.state_path.write_text(json.dumps(data))
    two = make_spec(slurm_params={"nodes": 2})
    m = AllocationMachine(two, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert m.prepare().state is State.Ready
    assert m.path[:3] == ["NoState", "Validating", "Incompatible"]
    assert json.loads(one.state_path.read_text())["nodes"] == 2
    # and an old file that fits is completed and saved on reuse
    data = json.loads(one.state_path.read_text())
    del data["cpus_per_node"]
    one.state_path.write_text(json.dumps(data))
    m = AllocationMachine(one, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert m.prepare().state is State.Ready and m.path[-1] == "Ready"
    assert json.loads(one.state_path.read_text())["cpus_per_node"] == 1


def test_reuse_problems_say_why_a_task_per_gpu_spec_does_not_fit(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    fake = FakeCluster()
    pytest_spec = make_spec()
    assert Executor(pytest_spec, fake, clock=fake.clock).run().status is Status.PASSED  # type: ignore[arg-type]
    wide = make_spec(workflow_type="eval", slurm_params={"ntasks_per_node": 2})
    alloc = Allocation(pytest_spec.repo_root, fake)  # type: ignore[arg-type]
    assert alloc.reuse_problems(wide) == [
        "2 task(s) per node need 2 CPU(s) per node, the allocation has 1 (as granted by "
        "Slurm)"]
    report = Executor(wide, fake, clock=fake.clock).run()  # type: ignore[arg-type]
    assert report.status is Status.PASSED
    assert report.path[:3] == ["NoState", "Validating", "Incompatible"]
    assert alloc.reuse_problems(pytest_spec) == []  # the 2-CPU allocation holds 1 task


def _request(size):  # type: ignore[no-untyped-def]
    from slurm_fsm.backend import AllocationRequest
    from slurm_fsm.duration import Duration

    return AllocationRequest(partition="p", account="a", nodes=size.nodes,
                             time_limit=Duration.parse("01:00:00"), job_name="j",
                             log_path=Path("/tmp/x"), gpus_per_node=size.gpus_per_node,
                             ntasks_per_node=size.ntasks_per_node)


def test_a_pytest_allocation_on_gpus_holds_the_next_one_rank_per_gpu_job(
        make_spec: SpecFactory) -> None:
    """17.7's normal TensorRT-LLM sequence: a 1-task pytest job on 4 GPUs, then an eval
    job with one rank per GPU. The allocation holds one task per GPU, so it is reused;
    an 8-rank job does not fit and is replaced, saying why."""
    fake = FakeCluster()
    pytest_spec = make_spec(slurm_params={"gpus_per_node": 4})
    first = Executor(pytest_spec, fake, clock=fake.clock).run()  # type: ignore[arg-type]
    assert first.status is Status.PASSED
    request = next(c.args["request"] for c in fake.calls if c.op == "allocate")
    assert (request.ntasks_per_node, request.gpus_per_node, request.ntasks) == (4, 4, None)
    state = json.loads(pytest_spec.state_path.read_text())
    assert (state["gpus_per_node"], state["cpus_per_node"]) == (4, 4)
    eval_spec = make_spec(workflow_type="eval",
                          slurm_params={"gpus_per_node": 4, "ntasks_per_node": 4})
    alloc = Allocation(pytest_spec.repo_root, fake)  # type: ignore[arg-type]
    assert alloc.reuse_problems(eval_spec) == []
    second = Executor(eval_spec, fake, clock=fake.clock).run()  # type: ignore[arg-type]
    assert second.status is Status.PASSED
    assert second.allocation_id == first.allocation_id
    wide = make_spec(slurm_params={"gpus_per_node": 8, "ntasks_per_node": 8})
    assert alloc.reuse_problems(wide) == [
        "8 task(s) per node need 8 CPU(s) per node, the allocation has 4 (as granted by "
        "Slurm)",
        "gpus_per_node 8 is more than the allocation's 4 (as granted by Slurm)"]


def test_a_grant_that_cannot_be_read_is_read_by_the_next_run(make_spec: SpecFactory) -> None:
    from slurm_fsm.errors import CommandFailed

    fake = FakeCluster()
    spec = make_spec()
    fake.fail_next("granted", CommandFailed(["scontrol"], 1, "boom"))
    m = AllocationMachine(spec, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert m.prepare().state is State.Ready
    assert any("could not be read" in n for n in m.notes)
    assert "cpus_per_node" not in json.loads(spec.state_path.read_text())
    again = AllocationMachine(spec, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert again.prepare().state is State.Ready
    assert again.path == ["NoState", "Validating", "Ready"]
    assert json.loads(spec.state_path.read_text())["cpus_per_node"] == 1


# ------------------------------------------------------------- cpus_per_task (issue 23)


def test_cpus_per_task_asks_that_many_cpus_per_task_of_the_allocation(
        make_spec: SpecFactory) -> None:
    """A 1-task job on 4 GPUs with 2 CPUs a task: one task per GPU, each of 2 CPUs, asked
    as 8 one-CPU tasks per node (the job's steps say their own task count)."""
    spec = make_spec(slurm_params={"gpus_per_node": 4, "cpus_per_task": 2})
    size = allocation_request_size(spec)
    assert (size.ntasks_per_node, size.gpus_per_node) == (8, 4)
    needs = job_needs(spec)
    assert (needs.cpus_per_task, needs.cpus_per_node) == (2, 2)


def test_an_allocation_with_too_few_cpus_for_cpus_per_task_is_refused(
        make_spec: SpecFactory) -> None:
    spec = make_spec(slurm_params={"ntasks_per_node": 2, "cpus_per_task": 4})
    assert capacity_problems(_alloc(cpus_per_node=4), spec) == [
        "2 task(s) of 4 CPUs per node need 8 CPU(s) per node, the allocation has 4 (as "
        "granted by Slurm)"]
    assert capacity_problems(_alloc(cpus_per_node=8), spec) == []


@pytest.mark.parametrize("value", [0, -1, "two", 1.5, 5000])
def test_a_bad_cpus_per_task_is_refused_by_name(make_spec: SpecFactory, value: object) -> None:
    with pytest.raises(SpecError) as err:
        make_spec(slurm_params={"cpus_per_task": value})
    assert any(p.startswith("slurm_params.cpus_per_task: ") for p in err.value.problems), \
        err.value.problems


# ------------------------------------------------- the allocation's CPUs (issue 44.4)


def _cpus(nodes: tuple[tuple[int, int], ...] = ((8, 4),),
          def_cpu_per_gpu: int | None = None) -> NodeCpus:
    return NodeCpus(nodes=nodes, def_cpu_per_gpu=def_cpu_per_gpu)


def test_a_gpu_allocation_asks_the_nodes_cpus_in_proportion_to_its_gpus(
        make_spec: SpecFactory) -> None:
    """Before: one CPU per task, so a 4-GPU allocation held 4 CPUs and a lone 1-GPU
    job in it one."""
    spec = make_spec(slurm_params={"gpus_per_node": 1}, alloc_gpus_per_node=4)
    assert allocation_request_size(spec).ntasks_per_node == 4  # nothing known: as before
    size = allocation_request_size(spec, _cpus())
    assert (size.ntasks_per_node, size.gpus_per_node) == (8, 4)
    assert "8 CPUs for 4 GPUs" in size.cpus_from
    half = make_spec(slurm_params={"gpus_per_node": 2})
    assert allocation_request_size(half, _cpus(((112, 8),))).ntasks_per_node == 28
    # nodes of several shapes: what every node that has the GPUs can give
    mixed = _cpus(((112, 8), (32, 4), (64, 2)))
    assert allocation_request_size(half, mixed).ntasks_per_node == 16


def test_def_cpu_per_gpu_decides_where_the_cluster_sets_it(make_spec: SpecFactory) -> None:
    spec = make_spec(slurm_params={"gpus_per_node": 1}, alloc_gpus_per_node=4)
    size = allocation_request_size(spec, _cpus(def_cpu_per_gpu=3))
    assert size.ntasks_per_node == 12 and "DefCpuPerGPU=3" in size.cpus_from
    # never fewer than the job's own tasks ask
    many = make_spec(slurm_params={"gpus_per_node": 2, "ntasks_per_node": 8})
    assert allocation_request_size(many, _cpus(def_cpu_per_gpu=1)).ntasks_per_node == 8


def test_the_spec_s_figure_wins(make_spec: SpecFactory) -> None:
    spec = make_spec(slurm_params={"gpus_per_node": 1}, alloc_gpus_per_node=2,
                     alloc_cpus_per_node=6)
    size = allocation_request_size(spec, _cpus(def_cpu_per_gpu=1))
    assert size.ntasks_per_node == 6 and "alloc_cpus_per_node" in size.cpus_from
    # cpus_per_task is the job's floor, not the allocation's figure
    cpt = make_spec(slurm_params={"gpus_per_node": 1, "cpus_per_task": 4})
    assert allocation_request_size(cpt, _cpus()).ntasks_per_node == 4
    assert allocation_request_size(cpt, _cpus(((112, 8),))).ntasks_per_node == 14


def test_an_allocation_without_gpus_asks_its_tasks_cpus(make_spec: SpecFactory) -> None:
    spec = make_spec(slurm_params={"ntasks_per_node": 2})
    assert allocation_request_size(spec, _cpus(def_cpu_per_gpu=3)).ntasks_per_node == 2


@pytest.mark.parametrize(("value", "params", "message"), [
    (2, {"ntasks_per_node": 2, "cpus_per_task": 2},
     "alloc_cpus_per_node: must be >= the job's CPUs per node (4: 2 task(s) x "
     "cpus_per_task 2): the allocation must hold the job, got 2"),
    (0, {}, "alloc_cpus_per_node: must be >= 1, got 0"),
    ("many", {}, "alloc_cpus_per_node: "),
])
def test_alloc_cpus_per_node_smaller_than_the_job_is_refused_by_name(
        make_spec: SpecFactory, value: object, params: dict[str, int], message: str) -> None:
    with pytest.raises(SpecError) as err:
        make_spec(slurm_params=params, alloc_cpus_per_node=value)
    assert any(p.startswith(message) for p in err.value.problems), err.value.problems


def test_the_machine_sizes_the_allocation_from_what_the_cluster_says(
        make_spec: SpecFactory) -> None:
    """On the fake: sinfo's CPUs and GPUs per node; with DefCpuPerGPU set, that (the
    fake grants it as Slurm does, whatever the tasks asked)."""
    spec = make_spec(slurm_params={"gpus_per_node": 1}, alloc_gpus_per_node=4)
    fake = FakeCluster(preflight=True, gpus_per_node=4, cpus_per_node=8)
    assert Executor(spec, fake, clock=fake.clock).run().status is Status.PASSED  # type: ignore[arg-type]
    (call,) = [c for c in fake.calls if c.op == "allocate"]
    assert call.args["request"].ntasks_per_node == 8
    assert json.loads(spec.state_path.read_text())["cpus_per_node"] == 8
    other = make_spec(slurm_params={"gpus_per_node": 1}, alloc_gpus_per_node=2,
                      repo_root=str(spec.repo_root.parent / "other"))
    fake = FakeCluster(preflight=True, gpus_per_node=4, cpus_per_node=8)
    fake.default_cpus_per_gpu = 3
    assert Executor(other, fake, clock=fake.clock).run().status is Status.PASSED  # type: ignore[arg-type]
    assert json.loads(other.state_path.read_text())["cpus_per_node"] == 6
