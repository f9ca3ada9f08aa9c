"""Issue 28, the window between the lease gate's check and its cancel: Dekker's order
with Slurm as the one store. The canceller starts a closing marker, then lists the
steps; the taker starts its lease, then lists the steps. Each interleaving driven on
the fake cluster, and a guard that no module cancels a whole allocation past the gate."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_fsm.backend import StepInfo
from slurm_fsm.errors import JobNotFound
from slurm_fsm.lease import (
    CLOSING_S,
    AllocationInUse,
    LeaseGate,
    closing_markers,
    closing_name,
    holders_of,
    lease_name,
    wait_out_closing,
)
from slurm_fsm.runrecord import RunBook
from slurm_fsm.testing import FakeCluster

NOW = 1_800_000_000
A, B = "raaaaaaaaaaaa", "rbbbbbbbbbbbb"


class Hooked(FakeCluster):
    """A fake whose ``list_steps`` runs ``before[n]`` before its n-th answer (0-based):
    another host acting between two of this process's controller calls."""

    def __init__(self) -> None:
        super().__init__()
        self.before: dict[int, Callable[[], None]] = {}
        self.listed = 0

    def list_steps(self, job_id: str) -> list[StepInfo]:
        hook = self.before.pop(self.listed, None)
        self.listed += 1
        if hook is not None:
            hook()
        return super().list_steps(job_id)


def wall(fake: FakeCluster) -> Callable[[], float]:
    """Epoch seconds: NOW when the fake's clock starts, moving with it."""
    start = fake.clock.now()
    return lambda: NOW + fake.clock.now() - start


def gate_on(fake: FakeCluster, tmp_path: Path, wait_s: float = 0) -> LeaseGate:
    return LeaseGate(RunBook(tmp_path / ".slurm_alloc.json"), wait_s=wait_s,
                     clock=fake.clock, backend=fake, wall=wall(fake))


def names(fake: FakeCluster, job: str) -> list[str]:
    return [s.name for s in fake.jobs[job].steps.values()]


def test_a_closing_marker_is_no_lease_and_is_parsed_back() -> None:
    marker = StepInfo(job_id="7", step_id="2", name=closing_name(A, NOW + 9), state="RUNNING")
    assert marker.name == f"fsm-closing.{A}.{NOW + 9}"
    assert holders_of([marker], [], job_id="7", own=None, now=NOW, host="h") == ([], [])
    (found,) = closing_markers([marker], now=NOW)
    assert found.run_id == A and found.max_until == NOW + 9
    assert closing_markers([marker], now=NOW + 10) == []  # past max_until: ignored
    assert closing_markers([marker], own=(A,), now=NOW) == []


def test_no_lease_the_gate_cancels_with_its_marker_up(tmp_path: Path) -> None:
    fake = Hooked()
    job = fake.make_job("alloc", fake.user).job_id
    seen: list[list[str]] = []
    fake.before[1] = lambda: seen.append(names(fake, job))  # the second list
    assert gate_on(fake, tmp_path).cancel(job, "releasing it") is True
    assert [n.split(".")[0] for n in seen[0]] == ["fsm-closing"]  # up before the check
    assert fake.ops().index("start_lease") < fake.ops().index("cancel")
    assert not fake.jobs[job].active


def test_a_lease_that_comes_up_before_the_cancel_makes_the_canceller_withdraw(
        tmp_path: Path) -> None:
    """The first check passes; a taker on another host starts its lease; the check
    after the marker sees it: no cancel, the marker withdrawn, AllocationInUse."""
    fake = Hooked()
    job = fake.make_job("alloc", fake.user).job_id
    fake.before[1] = lambda: fake.start_lease(job, lease_name(B, NOW + 3600)) and None
    with pytest.raises(AllocationInUse, match=f"run {B}"):
        gate_on(fake, tmp_path).cancel(job, "releasing it")
    assert "cancel" not in fake.ops() and fake.jobs[job].active
    assert names(fake, job) == [lease_name(B, NOW + 3600)]  # the marker is gone


def test_a_waiting_canceller_withdraws_then_cancels_once_the_lease_ends(
        tmp_path: Path) -> None:
    fake = Hooked()
    job = fake.make_job("alloc", fake.user).job_id
    taker: list[object] = []
    fake.before[1] = lambda: taker.append(fake.start_lease(job, lease_name(B, NOW + 3600)))
    fake.before[3] = lambda: fake.lease_owner_dies(B) and None  # while the gate waits
    assert gate_on(fake, tmp_path, wait_s=600).cancel(job, "releasing it") is True
    assert fake.count("start_lease") == 3  # the taker's, two markers
    assert not fake.jobs[job].active


def test_a_gone_allocation_is_nothing_to_cancel(tmp_path: Path) -> None:
    fake = FakeCluster()
    job = fake.make_job("alloc", fake.user).job_id
    fake.cancel(job)
    fake.reset_calls()
    assert gate_on(fake, tmp_path).cancel(job, "releasing it") is False
    assert "cancel" not in fake.ops()


def test_the_taker_waits_out_a_marker_then_finds_the_job_gone() -> None:
    """The canceller listed before the taker's lease came up and cancels: the taker
    sees its marker, waits, and is told the allocation is gone (step 0 again)."""
    fake = Hooked()
    job = fake.make_job("alloc", fake.user).job_id
    fake.start_lease(job, closing_name(A, NOW + CLOSING_S))
    fake.start_lease(job, lease_name(B, NOW + 3600))
    fake.before[2] = lambda: fake.cancel(job)
    said: list[str] = []
    with pytest.raises(JobNotFound):
        wait_out_closing(fake, job, own=(B,), clock=fake.clock, say=said.append,
                         wall=wall(fake))
    assert fake.listed == 3 and len(said) == 1 and A in said[0]
    assert 0 < sum(fake.clock.slept) < 5


def test_the_taker_goes_on_once_the_marker_is_withdrawn() -> None:
    fake = Hooked()
    job = fake.make_job("alloc", fake.user).job_id
    marker = fake.start_lease(job, closing_name(A, NOW + CLOSING_S))
    fake.start_lease(job, lease_name(B, NOW + 3600))
    fake.before[1] = marker.stop
    wait_out_closing(fake, job, own=(B,), clock=fake.clock, wall=wall(fake))
    assert fake.listed == 2 and fake.jobs[job].active


def test_the_taker_ignores_a_marker_past_max_until_and_a_dead_cancellers() -> None:
    fake = FakeCluster()
    job = fake.make_job("alloc", fake.user).job_id
    fake.start_lease(job, closing_name(A, NOW - 1))  # its canceller paused too long
    fake.start_lease(job, lease_name(B, NOW + 3600))
    wait_out_closing(fake, job, own=(B,), clock=fake.clock, wall=lambda: NOW)
    assert fake.clock.slept == []
    fake.start_lease(job, closing_name(A, NOW + 60)).stop()  # its canceller died
    wait_out_closing(fake, job, own=(B,), clock=fake.clock, wall=lambda: NOW)
    assert fake.count("list_steps") == 2 and fake.clock.slept == []


#: whole-allocation cancels (``backend.cancel(job)``, no step id) outside lease.py,
#: each where no lease can exist: (module, function) and why
ALLOWED = {
    ("effects.py", "cancel_unleased"): "step 0's one whole cancel (its callers below)",
    ("allocate.py", "_track_pending"): "its state file could not be written: no run knows it",
    ("allocate.py", "_never_running"): "this run's own new allocation, still PENDING",
    ("handoff.py", "queue_successor"): "the successor's file could not be written",
    ("handoff.py", "drop_successor"): "a successor that never started: no lease on it",
    ("monitor.py", "_cancel_job"): "a one-shot batch job, not an allocation",
    ("subprocess_backend.py", "allocate"): "the backend's own salloc, not yet returned",
    ("subprocess_backend.py", "_adopt_or_cancel"): "the backend's own salloc",
}


def _whole_cancels(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out: list[str] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            whole = (node.func.attr == "cancel" and len(node.args) == 1
                     and not node.keywords and isinstance(node.func.value, ast.Attribute)
                     and node.func.value.attr == "backend")
            if whole or node.func.attr == "cancel_unleased":  # step 0's, by its callers
                out.append(fn.name)
    return out


def test_no_module_cancels_a_whole_allocation_past_the_gate() -> None:
    root = Path(__file__).resolve().parents[1] / "slurm_fsm"
    found = {(p.name, fn) for p in root.rglob("*.py") if p.name != "lease.py"
             for fn in _whole_cancels(p)}
    assert found <= set(ALLOWED), sorted(found - set(ALLOWED))


def test_a_pending_allocation_is_cancelled_without_a_marker(tmp_path: Path) -> None:
    """A step never starts on a PENDING job (the marker's srun would wait for it,
    measured: timed out), nor a taker's lease: cancelled at once."""
    fake = FakeCluster()
    pending = fake.make_job("alloc", fake.user, state="PENDING")
    pending.pending_until = 1e12
    job = pending.job_id
    assert gate_on(fake, tmp_path).cancel(job, "releasing it") is True
    assert "start_lease" not in fake.ops() and not fake.jobs[job].active
