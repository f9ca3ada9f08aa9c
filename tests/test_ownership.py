"""Ownership of allocations and the state file, on the fake cluster (issue 10, items
3-6 and 13): "ours" is this checkout's tag whatever the job name; a state file naming
another checkout's allocation is left alone; a job-name change does not leak; nothing
is allocated before the state file is known to be writable; every state-file read is
bounded; no id from a file reaches a command line unchecked.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from slurm_fsm.backend import AllocationRequest, JobInfo, check_job_id, is_job_id
from slurm_fsm.errors import ControllerUnreachable, NotOurJobError
from slurm_fsm.machine import ORPHAN_GRACE_S, AllocationMachine
from slurm_fsm.ownership import (
    Ownership,
    checkout_tag,
    describe,
    made_by,
    ownership,
    request_comment,
    request_of,
    split_comment,
)
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState
from slurm_fsm.step0.table import State, repo_tag
from slurm_fsm.testing import FakeCluster
from slurm_fsm.testing.fake import CONTROLLER_OPS

from conftest import SpecFactory

BAD_IDS = ["-1", "--help", "12;rm -rf /", "", " 12", "12 13", "0", "0x1f", "\uff11\uff12", "1.5",
           "$(id)", "12\n13", "-j", "99999999999999"]


def machine(spec: JobSpec, fake: FakeCluster, **kw: object) -> AllocationMachine:
    return AllocationMachine(spec, fake, clock=fake.clock, **kw)  # type: ignore[arg-type]


def slurm_ops(fake: FakeCluster) -> list[str]:
    return [op for op in fake.ops() if op in CONTROLLER_OPS]


def ids_used(fake: FakeCluster) -> set[str]:
    """Every job id the fake was asked about or told to cancel."""
    ids = {str(c.args["job_id"]) for c in fake.calls if c.args.get("job_id") is not None}
    return ids | {c.args["request"].job_id for c in fake.calls if c.op == "run_step"}


def cancelled(fake: FakeCluster) -> list[str]:
    return [str(c.args["job_id"]) for c in fake.calls if c.op == "cancel"]


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster()


def copy_checkout(spec: JobSpec, to: Path) -> JobSpec:
    """``cp -r`` of the repo root, work_dirs/ and its state file included."""
    shutil.copytree(spec.repo_root, to)
    return attrs.evolve(spec, repo_root=to)


# ------------------------------------------------------------------- the one rule


def job(**kw: str) -> JobInfo:
    return JobInfo(job_id="7", state="RUNNING", **kw)


@pytest.mark.parametrize(("info", "expected"), [
    (job(name="new", user="me", comment="T"), Ownership.TAGGED),
    (job(name="old-name", user="me", comment="T"), Ownership.TAGGED),  # whatever the name
    (job(name="new", user="me", comment="slurm_fsm:repo=other"), Ownership.OTHER_CHECKOUT),
    (job(name="new", user="me", comment="my own note"), Ownership.OTHER_CHECKOUT),
    (job(name="new", user="me"), Ownership.UNTAGGED),  # the original procedure's
    (job(name="interactive", user="me"), Ownership.OTHER),
    (job(name="new", user="bob", comment="T"), Ownership.OTHER),
    (job(name="new", user="bob"), Ownership.OTHER),
])
def test_ownership_rule(info: JobInfo, expected: Ownership) -> None:
    owner = ownership(info, user="me", tag="T", names={"new"})
    assert owner is expected
    assert owner.ours == (expected in (Ownership.TAGGED, Ownership.UNTAGGED))


TAG = checkout_tag("/a/repo")
OTHER_TAG = checkout_tag("/a/repo-copy")


@pytest.mark.parametrize(("comment", "expected", "nonce"), [
    (TAG, Ownership.TAGGED, None),  # the version before the nonce: still ours
    (f"{TAG};req=0123abcd", Ownership.TAGGED, "0123abcd"),
    (request_comment(TAG, "deadbeef"), Ownership.TAGGED, "deadbeef"),
    (f"{OTHER_TAG};req=0123abcd", Ownership.OTHER_CHECKOUT, "0123abcd"),
    (OTHER_TAG, Ownership.OTHER_CHECKOUT, None),
    # someone's own comments that contain our tag are not ours
    (f"see {TAG}", Ownership.OTHER_CHECKOUT, None),
    (f"{TAG} copied by hand", Ownership.OTHER_CHECKOUT, None),
    (f"{TAG}0", Ownership.OTHER_CHECKOUT, None),
    (f"{TAG};req=", Ownership.OTHER_CHECKOUT, None),
    (f"{TAG};req=NOT-HEX!", Ownership.OTHER_CHECKOUT, None),
    (f"{TAG};req=0123abcd;more", Ownership.OTHER_CHECKOUT, None),
    (f"x{TAG};req=0123abcd", Ownership.OTHER_CHECKOUT, None),
    (f"{TAG};REQ=0123abcd", Ownership.OTHER_CHECKOUT, None),
])
def test_ownership_of_tags_with_and_without_a_nonce(
        comment: str, expected: Ownership, nonce: str | None) -> None:
    info = job(name="any", user="me", comment=comment)
    assert ownership(info, user="me", tag=TAG, names={"new"}) is expected
    assert request_of(info) == nonce
    if expected is Ownership.OTHER_CHECKOUT:
        assert comment in describe(info, expected)


def test_made_by_is_the_requests_own_job_only() -> None:
    mine = job(name="n", user="me", comment=request_comment(TAG, "0123abcd"))
    assert made_by(mine, user="me", tag=TAG, nonce="0123abcd")
    concurrent = job(name="n", user="me", comment=request_comment(TAG, "fedcba98"))
    assert not made_by(concurrent, user="me", tag=TAG, nonce="0123abcd")
    old = job(name="n", user="me", comment=TAG)  # ours, but no request's in particular
    assert not made_by(old, user="me", tag=TAG, nonce="0123abcd")
    theirs = job(name="n", user="me", comment=request_comment(OTHER_TAG, "0123abcd"))
    assert not made_by(theirs, user="me", tag=TAG, nonce="0123abcd")
    bobs = job(name="n", user="bob", comment=request_comment(TAG, "0123abcd"))
    assert not made_by(bobs, user="me", tag=TAG, nonce="0123abcd")


def test_request_comment_round_trips_and_refuses_a_bad_nonce() -> None:
    assert split_comment(request_comment(TAG, "0123abcd")) == (TAG, "0123abcd")
    assert request_comment(TAG, None) == TAG
    with pytest.raises(ValueError, match="nonce"):
        request_comment(TAG, "x;y")


# every comparison of comments and tags is in ownership.py: none creeps back elsewhere
_SOURCES = [Path(__file__).resolve().parents[1] / d
            for d in ("slurm_fsm", "slurm_fsm_dev", "benchmarks")]
_STRING_OPS = {"startswith", "endswith", "partition", "rpartition", "split", "find",
               "index", "removeprefix", "removesuffix"}


def _comment_comparisons(path: Path) -> list[str]:
    import ast

    def is_comment(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "comment") or \
            (isinstance(node, ast.Name) and node.id in ("comment", "tag"))

    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.value) for n in ast.walk(tree)  # docstrings may say it
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
                is_comment(side) for side in (node.left, *node.comparators)):
            found.append(f"{path.name}:{node.lineno}: compares a comment")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _STRING_OPS and is_comment(node.func.value):
            found.append(f"{path.name}:{node.lineno}: .{node.func.attr}() of a comment")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs \
                and ("slurm_fsm:repo=" in node.value or ";req=" in node.value):
            found.append(f"{path.name}:{node.lineno}: spells the tag's format")
    return found


def test_comments_are_compared_in_ownership_only() -> None:
    found = [hit for root in _SOURCES for path in sorted(root.rglob("*.py"))
             if path.name != "ownership.py" for hit in _comment_comparisons(path)]
    assert found == [], "compare comments through slurm_fsm.ownership: " + "; ".join(found)


def test_the_comment_guard_catches_a_second_comparison(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def mine(job, tag):\n    return job.comment == tag\n"
                      "def also(job):\n    return job.comment.startswith('x')\n"
                      "PREFIX = 'slurm_fsm:repo='\n")
    assert len(_comment_comparisons(sneaky)) == 3


def test_the_tag_is_the_checkout() -> None:
    assert checkout_tag("/a/repo") != checkout_tag("/a/repo-copy")
    assert checkout_tag("/a/repo").startswith("slurm_fsm:repo=")


# ------------------------------------------------------ a lost answer, the nonce


def test_a_lost_allocate_answer_is_adopted_not_allocated_again(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """salloc made the job but its answer was lost ("Socket timed out"): the retry,
    with the same request (nonce), adopts that job. Never two allocations."""
    spec = make_spec()
    fake.lose_allocate_answers = 1
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    allocs = [j for j in fake.jobs.values() if j.kind == "alloc"]
    assert len(allocs) == 1
    assert m.alloc is not None and m.alloc.job_id == allocs[0].job_id
    requests = [c.args["request"] for c in fake.calls if c.op == "allocate"]
    assert len(requests) == 2 and requests[0] == requests[1]  # the same request, twice
    nonce = requests[0].nonce
    assert nonce is not None
    assert allocs[0].comment == f"{repo_tag(spec)};req={nonce}"  # squeue %k
    assert m.alloc.request == nonce  # recorded in the state file (an added key)
    assert f'"request": "{nonce}"' in spec.state_path.read_text()
    assert any("answer was lost" in w for w in m.warnings)
    assert not cancelled(fake)


def test_the_fake_adopts_its_own_request_only(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """The fake models the lost answer: the retry of the same request (nonce) adopts
    the job it made; another request's live job is not taken for it."""
    spec = make_spec()
    request = AllocationRequest(
        partition="batch", account="acct", nodes=1, time_limit=spec.alloc_time_limit,
        job_name=spec.job_name, log_path=spec.repo_root / "work_dirs" / ".salloc.log",
        user=fake.user, comment=repo_tag(spec), nonce="0123abcd")
    theirs = fake.make_job(spec.job_name, fake.user,
                           comment=request_comment(repo_tag(spec), "fedcba98")).job_id
    fake.lose_allocate_answers = 1
    with pytest.raises(ControllerUnreachable):
        fake.allocate(request)
    mine = next(j.job_id for j in fake.jobs.values() if j.job_id != theirs)
    assert fake.allocate(request) == mine != theirs
    assert len([j for j in fake.jobs.values() if j.kind == "alloc"]) == 2


def test_an_allocation_tagged_before_the_nonce_is_still_ours(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """A live allocation of the version before (bare tag, no nonce) that the state
    file names is reused; one without a state file is released as an orphan."""
    spec = make_spec()
    first = machine(spec, fake)
    assert first.prepare().state is State.Ready
    assert first.alloc is not None
    old = first.alloc.job_id
    fake.jobs[old].comment = repo_tag(spec)  # as the version before wrote it
    again = machine(spec, fake)
    assert again.prepare().state is State.Ready
    assert again.alloc is not None and again.alloc.job_id == old
    spec.state_path.unlink()
    fake.reset_calls()
    third = machine(spec, fake)
    assert third.prepare().state is State.Ready
    assert old in cancelled(fake)  # 0D: ours, although it has no nonce


# -------------------------------------------------------------- a copied checkout


@pytest.mark.parametrize("nodes", [1, 2], ids=["compatible", "incompatible"])
def test_copied_checkout_never_reuses_nor_cancels_the_originals_allocation(
        tmp_path: Path, make_spec: SpecFactory, fake: FakeCluster, nodes: int) -> None:
    original = make_spec()
    first = machine(original, fake)
    assert first.prepare().state is State.Ready
    assert first.alloc is not None
    theirs = first.alloc.job_id
    copy = copy_checkout(original, tmp_path / "copy")
    copy = attrs.evolve(copy, slurm_params=attrs.evolve(copy.slurm_params, nodes=nodes))
    assert copy.state_path.read_text() == original.state_path.read_text()
    fake.reset_calls()

    m = machine(copy, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "NoState", "Allocating", "Ready"]
    assert m.alloc is not None and m.alloc.job_id != theirs
    assert theirs not in cancelled(fake)
    assert fake.jobs[theirs].state == "RUNNING"
    warning = next(w for w in m.warnings if f"job {theirs}" in w)
    assert "another checkout's allocation" in warning and "left alone" in warning
    request = next(c.args["request"] for c in fake.calls if c.op == "allocate")
    assert request.comment == repo_tag(copy) != repo_tag(original)
    # the original keeps its allocation, untouched
    again = machine(original, fake)
    assert again.prepare().state is State.Ready
    assert again.alloc is not None and again.alloc.job_id == theirs


def test_copied_checkout_release_refuses_the_originals_allocation(
        tmp_path: Path, make_spec: SpecFactory, fake: FakeCluster) -> None:
    original = make_spec()
    assert machine(original, fake).prepare().state is State.Ready
    theirs = fake.active_jobs()[0].job_id
    copy = attrs.evolve(copy_checkout(original, tmp_path / "copy"), release_allocation=True)
    m = machine(copy, fake)
    assert m.prepare().state is State.Failed
    assert m.failure is not None and isinstance(m.failure.error, NotOurJobError)
    assert "another checkout's allocation" in m.failure.message
    assert theirs not in cancelled(fake) and fake.jobs[theirs].state == "RUNNING"


def test_another_checkouts_pending_allocation_is_not_waited_for(
        tmp_path: Path, make_spec: SpecFactory, fake: FakeCluster) -> None:
    original = make_spec()
    assert machine(original, fake).prepare().state is State.Ready
    theirs = fake.active_jobs()[0]
    theirs.state, theirs.pending_until = "PENDING", fake.clock.now() + 10_000
    copy = copy_checkout(original, tmp_path / "copy")
    m = machine(copy, fake, pending_wait_s=60)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "NoState", "Allocating", "Ready"]
    assert theirs.job_id not in cancelled(fake)


# ------------------------------------------------------------- a job-name change


def test_job_name_change_replaces_the_allocation_of_the_state_file(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    old = machine(make_spec(alloc_job_name="acct-old.persistent"), fake)
    assert old.prepare().state is State.Ready
    assert old.alloc is not None
    old_id = old.alloc.job_id
    fake.reset_calls()

    m = machine(make_spec(alloc_job_name="acct-new.persistent"), fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Incompatible", "Allocating", "Ready"]
    assert cancelled(fake) == [old_id]
    assert fake.jobs[old_id].state == "CANCELLED"
    assert m.alloc is not None and m.alloc.job_id != old_id
    assert [j.name for j in fake.active_jobs()] == ["acct-new.persistent"]


def test_job_name_change_finds_the_orphan_by_tag(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(alloc_job_name="acct-old.persistent")
    assert machine(spec, fake).prepare().state is State.Ready
    old_id = fake.active_jobs()[0].job_id
    spec.state_path.unlink()

    m = machine(make_spec(alloc_job_name="acct-new.persistent"), fake)
    assert m.prepare().state is State.Ready
    assert fake.jobs[old_id].state == "CANCELLED"
    assert f"Released orphaned allocation {old_id} - state file was missing." in m.warnings
    assert [j.name for j in fake.active_jobs()] == ["acct-new.persistent"]


# ------------------------------------- a moment-old allocation is another run's, not an orphan


def _made_on_another_host(spec: JobSpec, fake: FakeCluster, **kw: object) -> str:
    """Run A's allocation, granted a moment ago on another login node, whose state file
    A has not written yet (the race campaign's races 72, 98, 204, 636, 963)."""
    return fake.make_job(spec.job_name, fake.user,  # type: ignore[arg-type]
                         comment=request_comment(repo_tag(spec), "a1b2c3d4"), **kw).job_id


def test_a_moment_old_allocation_without_a_state_file_is_adopted_not_cancelled(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    theirs = _made_on_another_host(spec, fake)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert cancelled(fake) == []  # before: cancelled as an orphan 16 ms after its grant
    assert "allocate" not in fake.ops()  # and no second allocation asked for
    assert m.alloc is not None and m.alloc.job_id == theirs
    assert f'"job_id": "{theirs}"' in spec.state_path.read_text()
    assert any(f"allocation {theirs} has no state file yet" in n and "adopted" in n
               for n in m.notes), m.notes


def test_an_allocation_past_the_grace_without_a_state_file_is_an_orphan(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    theirs = _made_on_another_host(spec, fake)
    fake.clock.advance(ORPHAN_GRACE_S)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert cancelled(fake) == [theirs]
    assert m.alloc is not None and m.alloc.job_id != theirs


@pytest.mark.parametrize("why", ["no nonce (a version before, or the procedure's)",
                                 "another job name"])
def test_only_a_requests_job_of_the_specs_name_gets_the_grace(
        make_spec: SpecFactory, fake: FakeCluster, why: str) -> None:
    spec = make_spec()
    if why.startswith("no nonce"):
        job = fake.make_job(spec.job_name, fake.user, comment=repo_tag(spec)).job_id
    else:
        job = fake.make_job("acct-old.persistent", fake.user,
                            comment=request_comment(repo_tag(spec), "a1b2c3d4")).job_id
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert cancelled(fake) == [job]


def test_a_moment_old_allocation_too_small_is_neither_used_nor_cancelled(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(slurm_params={"nodes": 2})
    theirs = _made_on_another_host(spec, fake, nodes=1)
    m = machine(spec, fake)
    assert m.prepare().state is State.Failed
    assert m.failure is not None and "smaller than this job needs" in m.failure.message
    assert cancelled(fake) == [] and fake.jobs[theirs].state == "RUNNING"


def test_orphan_search_leaves_untagged_jobs_under_other_names_alone(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    mine_untagged = fake.make_job("acct-trtllm.persistent", "tester")
    other_name = fake.make_job("interactive", "tester")
    other_user = fake.make_job("x", "bob", comment=repo_tag(make_spec()))
    m = machine(make_spec(), fake)
    assert m.prepare().state is State.Ready
    assert mine_untagged.state == "CANCELLED"  # the original procedure's orphan
    assert other_name.state == "RUNNING" and other_user.state == "RUNNING"


# ------------------------------------------------------- the state file can be written


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` cannot get new entries, for root too (``chattr +i``)."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(folder)], check=True, timeout=30)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(folder)], check=True, timeout=30)
    else:
        folder.chmod(0o500)
        try:
            yield
        finally:
            folder.chmod(0o700)


def test_state_path_that_is_a_directory_fails_before_any_allocation(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    spec.state_path.mkdir(parents=True)
    m = machine(spec, fake)
    assert m.prepare().state is State.Failed
    assert slurm_ops(fake) == []  # no salloc, no scancel: nothing to leak
    assert m.failure is not None
    assert str(spec.state_path) in m.failure.message
    assert "is a directory" in m.failure.message and "nothing was allocated" in m.failure.message
    assert fake.active_jobs() == []


def test_work_dirs_not_writable_fails_before_any_allocation(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    work_dirs = spec.state_path.parent
    work_dirs.mkdir(parents=True)
    # a lock file left by an earlier run: the lock works, only new files fail
    spec.state_path.with_name(spec.state_path.name + ".lock").touch()
    with read_only(work_dirs):
        m = machine(spec, fake)
        assert m.prepare().state is State.Failed
    assert slurm_ops(fake) == []
    assert m.failure is not None and "not writable" in m.failure.message
    assert fake.active_jobs() == []


# ------------------------------------------------------ unusable things at the state path


def _in_time(action: object, fifo: Path | None = None, timeout: float = 10.0) -> object:
    """Run ``action`` in a thread; fail (instead of hanging) when it does not end."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(action()), daemon=True)  # type: ignore[operator]
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        if fifo is not None:  # let the blocked reader go
            with contextlib.suppress(OSError):
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
        pytest.fail(f"still blocked after {timeout:g} s")
    return out[0] if out else None


def test_fifo_at_the_state_path_is_an_unusable_state_file(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    spec.state_path.parent.mkdir(parents=True)
    os.mkfifo(spec.state_path)
    m = machine(spec, fake)
    assert _in_time(m.prepare, spec.state_path).state is State.Ready
    assert any("a FIFO, not a regular file" in w and str(spec.state_path) in w
               for w in m.warnings)
    assert spec.state_path.is_file()  # replaced by the real state file
    released = machine(make_spec(release_allocation=True), fake)
    spec.state_path.unlink()
    os.mkfifo(spec.state_path)
    assert _in_time(released.prepare, spec.state_path).state is State.Released


def test_dev_zero_at_the_state_path_is_an_unusable_state_file(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    spec.state_path.parent.mkdir(parents=True)
    spec.state_path.symlink_to("/dev/zero")
    m = machine(spec, fake)
    assert _in_time(m.prepare).state is State.Ready
    # a link in the shared work_dirs is never followed (issue 20): refused as a link
    assert any("a symbolic link" in w for w in m.warnings), m.warnings
    assert Path("/dev/zero").is_char_device()  # the link was replaced, not its target


# ----------------------------------------------------------------- ids from the file


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_bad_job_id_in_the_state_file_never_reaches_slurm(
        make_spec: SpecFactory, fake: FakeCluster, bad: str) -> None:
    spec = make_spec()
    orphan = machine(spec, fake)
    assert orphan.prepare().state is State.Ready
    assert orphan.alloc is not None
    spec.state_path.write_text(attrs.evolve(orphan.alloc, job_id=bad).to_json())
    fake.reset_calls()
    fake.clock.advance(ORPHAN_GRACE_S)  # not a moment old: an orphan, not another run's

    m = machine(spec, fake)
    assert m.prepare().state is State.Ready  # recovers, no hand deletion
    assert bad not in ids_used(fake)
    assert all(is_job_id(i) for i in ids_used(fake))
    assert any(re.search(r"job_id: (empty|not a Slurm job id)", w) for w in m.warnings)
    # the tag finds the allocation the corrupt file lost: cancelled, not leaked
    assert fake.jobs[orphan.alloc.job_id].state == "CANCELLED"
    assert [j.job_id for j in fake.active_jobs()] == [m.alloc.job_id if m.alloc else ""]


@pytest.mark.parametrize("bad", ["-1", "--help", "12;rm"])
def test_release_with_a_bad_job_id_cancels_nothing_by_it(
        make_spec: SpecFactory, fake: FakeCluster, bad: str) -> None:
    spec = make_spec()
    spec.state_path.parent.mkdir(parents=True)
    spec.state_path.write_text(AllocState(job_id="1", nodelist="n1",
        partition="batch", account="acct", nodes=1).to_json()
                               .replace('"1"', f'"{bad}"', 1))
    m = machine(make_spec(release_allocation=True), fake)
    assert m.prepare().state is State.Released
    # the id never reaches a command line; this checkout's allocation is looked up by
    # its tag instead (issue 20 item 13): one squeue of the user's jobs, no cancel
    assert slurm_ops(fake) == ["find_jobs"]
    assert any("not a Slurm job id" in w for w in m.warnings)


@pytest.mark.parametrize("bad", BAD_IDS)
def test_backends_refuse_ids_that_are_not_job_ids(fake: FakeCluster, bad: str) -> None:
    with pytest.raises(ValueError, match="not a Slurm job id"):
        check_job_id(bad)
    for call in (lambda: fake.query_job(bad), lambda: fake.cancel(bad),
                 lambda: fake.list_steps(bad)):
        with pytest.raises(ValueError, match="not a Slurm job id"):
            call()


@pytest.mark.parametrize("good", ["1", "123", "2147483647", "123_4", "123+1"])
def test_real_job_ids_pass(good: str) -> None:
    assert check_job_id(good) == good


def test_the_orphan_search_lists_the_users_jobs_not_one_name(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    from slurm_fsm.slurmcli import squeue_find_argv

    assert machine(make_spec(), fake).prepare().state is State.Ready
    (search,) = [c.args for c in fake.calls if c.op == "find_jobs"]
    assert search == {"name": None, "user": "tester"}
    argv = squeue_find_argv(None, "tester")
    assert argv[:3] == ["squeue", "-u", "tester"] and not any("--name" in a for a in argv)
    with pytest.raises(ValueError, match="needs a user"):
        squeue_find_argv(None, "")
