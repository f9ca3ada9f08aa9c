"""The warm successor's rules (issue 27), as tables: names, lead time, when to queue,
where a job goes, drain and release, the successor verdict, the record file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_fsm.backend import AllocationRequest, JobInfo
from slurm_fsm.duration import Duration
from slurm_fsm.errors import JobNotFound, SpecError
from slurm_fsm.history import RunEntry
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.paths import StatePaths
from slurm_fsm.slurmcli import salloc_argv
from slurm_fsm.spec import EXPIRY_MARGIN_S
from slurm_fsm.successor import (
    DEFAULT_LEAD_S,
    LEAD_SLACK_S,
    SINGLETON,
    Phase,
    SuccessorRecord,
    SuccessorVerdict,
    clear_successor,
    judge_successor,
    lead_time,
    other_name,
    p90,
    parity_names,
    parity_of,
    read_successor,
    successor_due,
    time_min_s,
    write_successor,
)
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

M = EXPIRY_MARGIN_S


# ------------------------------------------------------------------ names


def test_the_two_names_of_a_checkout() -> None:
    assert parity_names("acct-trtllm.persistent") == ("acct-trtllm.persistent",
                                                      "acct-trtllm.persistent-b")
    with pytest.raises(ValueError):
        parity_names("")


@pytest.mark.parametrize(("name", "parity", "other"), [
    ("x", "a", "x-b"),
    ("x-b", "b", "x"),
    ("y", None, "x-b"),  # outside the pair: counts as a
])
def test_names_alternate(name: str, parity: str | None, other: str) -> None:
    assert parity_of(name, "x") == parity
    assert other_name(name, "x") == other
    # alternating twice comes back: never a third name
    assert other_name(other_name(other, "x"), "x") == other


# ------------------------------------------------------------------ lead time


def entry(**kw: object) -> RunEntry:
    base: dict[str, object] = {"key": "k", "partition": "p", "nodes": 1, "image": "img"}
    base.update(kw)
    return RunEntry(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("values", "want"), [
    ([5.0], 5.0), ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 9), ([3, 1, 2], 3),
])
def test_p90_is_a_nearest_rank(values: list[float], want: float) -> None:
    assert p90(values) == want


def test_p90_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        p90([])


def test_lead_time_without_history_is_the_default() -> None:
    lt = lead_time([], partition="p", nodes=1, image="img")
    assert lt.seconds == DEFAULT_LEAD_S and lt.parts == {}
    assert "nothing measured" in lt.detail


def test_lead_time_adds_the_p90_of_each_part_and_the_slack() -> None:
    entries = [entry(queue_wait_s=float(q), import_s=20.0, install_s=30.0)
               for q in range(1, 11)]
    lt = lead_time(entries, partition="p", nodes=1, image="img")
    assert lt.parts == {"queue_wait_s": 9, "import_s": 20.0, "install_s": 30.0}
    assert lt.seconds == 9 + 20 + 30 + LEAD_SLACK_S


def test_lead_time_counts_only_the_same_shape() -> None:
    entries = [entry(queue_wait_s=1000.0, partition="other"),
               entry(queue_wait_s=1000.0, nodes=2),
               entry(queue_wait_s=1000.0, image="other"),
               entry(queue_wait_s=10.0)]
    assert lead_time(entries, partition="p", nodes=1, image="img").seconds == 10 + LEAD_SLACK_S


def test_lead_time_takes_the_newest_measures() -> None:
    entries = [entry(install_s=500.0)] * 5 + [entry(install_s=5.0)] * 20
    assert lead_time(entries, partition="p", nodes=1, image="img").seconds == 5 + LEAD_SLACK_S


# ------------------------------------------------------------------ when to queue


@pytest.mark.parametrize(("left", "longest", "lead", "due"), [
    (None, 600, 300, False),            # unlimited: never
    (10_000, 600, 300, False),          # plenty left
    (600 + 300 + M + 1, 600, 300, False),
    (600 + 300 + M, 600, 300, True),    # the boundary: due
    (100, 600, 300, True),
    (300 + M, None, 300, True),         # unknown longest counts 0
    (300 + M + 1, None, 300, False),
])
def test_when_a_successor_is_due(left: int | None, longest: int | None, lead: int,
                                 due: bool) -> None:
    assert successor_due(left, longest, lead) is due


@pytest.mark.parametrize(("longest", "want"), [(None, M), (0, M), (600, 600 + M)])
def test_time_min(longest: int | None, want: int) -> None:
    assert time_min_s(longest) == max(60, want)


def info(state: str, reason: str = "None") -> JobInfo:
    return JobInfo(job_id="7", state=state, reason=reason,
                   time_left=Duration.of_seconds(600))


@pytest.mark.parametrize(("row", "verdict"), [
    (None, SuccessorVerdict.FORGET),
    (info("COMPLETED"), SuccessorVerdict.FORGET),
    (info("CANCELLED"), SuccessorVerdict.FORGET),
    (info("PENDING", "Dependency"), SuccessorVerdict.WAIT),
    (info("PENDING", "Resources"), SuccessorVerdict.WAIT),
    (info("PENDING", "PartitionTimeLimit"), SuccessorVerdict.CANCEL),
    (info("PENDING", "DependencyNeverSatisfied"), SuccessorVerdict.CANCEL),
    (info("RUNNING"), SuccessorVerdict.SET_UP),
])
def test_judge_successor(row: JobInfo | None, verdict: SuccessorVerdict) -> None:
    assert judge_successor(row) is verdict


# ------------------------------------------------------------------ the record


@pytest.mark.parametrize(("state", "record"), [
    (".slurm_alloc.json", ".slurm_fsm_successor.json"),
    (".slurm_alloc.fake.json", ".slurm_fsm_successor.fake.json"),
    ("mine.json", "mine.json.successor.json"),
])
def test_record_path_beside_the_state_file(tmp_path: Path, state: str, record: str) -> None:
    assert StatePaths.for_state_file(tmp_path / state).successor_record == tmp_path / record


def test_record_round_trips_privately(tmp_path: Path) -> None:
    path = tmp_path / "w" / ".slurm_fsm_successor.json"
    rec = SuccessorRecord(job_id="12", job_name="x-b", predecessor="11",
                          phase=Phase.WARMING, requested_at="2026-01-01T00:00:00+00:00",
                          warmer_pid=4242, lead_s=90)
    write_successor(path, rec)
    assert read_successor(path) == rec
    assert os.stat(path).st_mode & 0o777 == 0o600
    clear_successor(path)
    assert read_successor(path) is None
    clear_successor(path)  # none is fine


@pytest.mark.parametrize("text", [
    "", "[]", "{", '{"job_id": "12"}', '{"job_id": "1;x", "job_name": "n", "predecessor": "1"}',
    '{"job_id": "12", "job_name": "n", "predecessor": "1", "phase": "dancing"}',
    '{"job_id": 12, "job_name": "n", "predecessor": "1"}',
])
def test_a_bad_record_is_no_record(tmp_path: Path, text: str) -> None:
    path = tmp_path / ".slurm_fsm_successor.json"
    path.write_text(text, encoding="utf-8")
    assert read_successor(path) is None


def test_a_record_is_additive(tmp_path: Path) -> None:
    """Unknown keys (a later version's) are ignored; wrong-typed optional ones dropped."""
    path = tmp_path / ".slurm_fsm_successor.json"
    path.write_text('{"job_id": "12", "job_name": "n", "predecessor": "1", "new": [1],'
                    ' "warmer_pid": true, "lead_s": -3, "phase": "ready"}', encoding="utf-8")
    rec = read_successor(path)
    assert rec == SuccessorRecord(job_id="12", job_name="n", predecessor="1",
                                  phase=Phase.READY)


# ------------------------------------------------------------------ spec, request, fake


def test_warm_successor_is_off_by_default(make_spec: SpecFactory) -> None:
    assert make_spec().warm_successor is False
    assert make_spec(warm_successor=True).warm_successor is True


def test_warm_successor_must_be_a_bool(make_spec: SpecFactory) -> None:
    with pytest.raises(SpecError, match="warm_successor"):
        make_spec(warm_successor="maybe")


def request(**over: object) -> AllocationRequest:
    fields: dict[str, object] = {
        "partition": "p", "account": "a", "nodes": 1,
        "time_limit": Duration.parse("00:10:00"), "job_name": "x",
        "log_path": Path("/nonexistent/.salloc.log"),
    }
    fields.update(over)
    return AllocationRequest(**fields)  # type: ignore[arg-type]


def test_salloc_asks_singleton_and_time_min_only_when_set() -> None:
    assert not any(a.startswith(("--dependency", "--time-min")) for a in salloc_argv(request()))
    argv = salloc_argv(request(dependency=SINGLETON,
                               time_min=Duration.of_seconds(time_min_s(600))))
    assert argv[-2:] == ["--dependency=singleton", "--time-min=00:15:00"]
    assert salloc_argv(request(dependency="afterok:12:13"))[-1] == "--dependency=afterok:12:13"


@pytest.mark.parametrize("bad", ["singleton,after:1", "after:x", "--x", "singleton "])
def test_salloc_refuses_another_dependency(bad: str) -> None:
    with pytest.raises(ValueError, match="dependency"):
        salloc_argv(request(dependency=bad))


def fake_alloc(fake: FakeCluster, tmp_path: Path, name: str, **over: object) -> str:
    return fake.allocate(request(partition="batch", account="acct", job_name=name,
                                 log_path=tmp_path / f"{name}.log", **over))


def test_fake_singleton_runs_one_job_of_a_name(tmp_path: Path) -> None:
    """Two racing singleton allocations of one name: 1 RUNNING + 1 PENDING(Dependency);
    the other parity name runs beside them; never a third of the checkout."""
    fake = FakeCluster()
    first = fake_alloc(fake, tmp_path, "x", dependency=SINGLETON)
    second = fake_alloc(fake, tmp_path, "x", dependency=SINGLETON)
    other = fake_alloc(fake, tmp_path, "x-b", dependency=SINGLETON)
    rows = {j: fake.query_job(j) for j in (first, second, other)}
    assert rows[first].state.is_running and rows[other].state.is_running
    assert rows[second].state.is_pending and rows[second].reason == "Dependency"
    fake.clock.advance(100)
    fake.cancel(first)
    row = fake.query_job(second)
    assert row.state.is_running
    assert row.time_left == Duration.of_seconds(600)  # started when the first ended


def test_fake_singleton_waits_out_a_walltime(tmp_path: Path) -> None:
    fake = FakeCluster()
    first = fake_alloc(fake, tmp_path, "x", dependency=SINGLETON)
    second = fake_alloc(fake, tmp_path, "x", dependency=SINGLETON)
    fake.clock.advance(650)  # the first timed out at 600 s: the second ran from then
    with pytest.raises(JobNotFound):
        fake.query_job(first)
    row = fake.query_job(second)
    assert row.state.is_running and row.time_left == Duration.of_seconds(550)


def test_fake_without_singleton_runs_both(tmp_path: Path) -> None:
    fake = FakeCluster()
    ids = [fake_alloc(fake, tmp_path, "x"), fake_alloc(fake, tmp_path, "x")]
    assert all(fake.query_job(j).state.is_running for j in ids)


def test_a_warm_successor_checkout_allocates_as_a_singleton(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec(warm_successor=True)
    m = AllocationMachine(spec, fake, clock=fake.clock)  # type: ignore[arg-type]
    m.prepare()
    (req,) = [c.args["request"] for c in fake.calls if c.op == "allocate"]
    assert req.dependency == SINGLETON and req.job_name == spec.job_name


def test_without_it_no_dependency_is_asked(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    AllocationMachine(make_spec(), fake, clock=fake.clock).prepare()  # type: ignore[arg-type]
    (req,) = [c.args["request"] for c in fake.calls if c.op == "allocate"]
    assert req.dependency is None
