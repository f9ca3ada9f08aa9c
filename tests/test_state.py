from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurm_fsm.errors import StateFileError
from slurm_fsm.state import MAX_STATE_BYTES, ORIGINAL_KEYS, AllocState, StateStore

from conftest import SpecFactory

#: A state file as the original agent procedure writes it (procedure.md).
ORIGINAL = """{"job_id": "123", "container_name": "llama_auto_test", "nodelist": "node[01-02]",
 "partition": "batch", "account": "acct", "nodes": 2, "gpus_per_node": 8,
 "docker_image": "nvcr.io/nvidia/pytorch:24.05-py3", "container_mounts": "/a:/a,/b:/b",
 "allocated_at": "2026-12-02T13:00:00+00:00", "time_limit": "04:00:00", "installed": true}"""


def test_reads_the_original_procedures_file(tmp_path: Path) -> None:
    store = StateStore(tmp_path / ".slurm_alloc.json")
    store.path.write_text(ORIGINAL)
    state = store.read()
    assert state == AllocState(
        job_id="123", container_name="llama_auto_test", nodelist="node[01-02]",
        partition="batch", account="acct", nodes=2, gpus_per_node=8,
        docker_image="nvcr.io/nvidia/pytorch:24.05-py3", container_mounts="/a:/a,/b:/b",
        allocated_at="2026-12-02T13:00:00+00:00", time_limit="04:00:00", installed=True,
    )


def test_writes_exactly_the_original_keys(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "work_dirs" / ".slurm_alloc.json")
    original = json.loads(ORIGINAL)
    store.path.parent.mkdir()
    store.path.write_text(ORIGINAL)
    loaded = store.read()
    assert loaded is not None
    store.write(loaded)
    written = json.loads(store.path.read_text())
    assert written == original
    assert list(written) == list(original) == list(ORIGINAL_KEYS)
    assert isinstance(written["job_id"], str)


def test_numeric_job_id_is_read_as_text(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "s.json")
    data = json.loads(ORIGINAL)
    data["job_id"] = 123
    store.path.write_text(json.dumps(data))
    state = store.read()
    assert state is not None and state.job_id == "123"


def test_write_is_private_and_atomic(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "wd" / ".slurm_alloc.json")
    store.write(AllocState(job_id="1", nodelist="n1", partition="p", account="a", nodes=1))
    mode = stat.S_IMODE(os.stat(store.path).st_mode)
    assert mode == 0o600
    assert [p.name for p in store.path.parent.iterdir()] == [".slurm_alloc.json"]
    store.write(AllocState(job_id="2", nodelist="n1", partition="p", account="a", nodes=1))
    again = store.read()
    assert again is not None and again.job_id == "2"


def test_failed_write_keeps_the_old_file(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store = StateStore(tmp_path / ".slurm_alloc.json")
    store.write(AllocState(job_id="1", nodelist="n1", partition="p", account="a", nodes=1))

    def boom(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        store.write(AllocState(job_id="2", nodelist="n1", partition="p", account="a", nodes=1))
    old = store.read()
    assert old is not None and old.job_id == "1"
    assert [p.name for p in tmp_path.iterdir()] == [".slurm_alloc.json"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [('{"job_id": "12", "nodel', "not valid JSON"), ("[]", "not a JSON object"),
     ('{"job_id": "12"}', "nodelist: required field missing"),
     ('{"job_id": " ", "nodelist": "n", "partition": "p", "account": "a", "nodes": 1}',
      "job_id: empty")],
)
def test_corrupt_files_raise_state_file_error(tmp_path: Path, content: str, reason: str) -> None:
    store = StateStore(tmp_path / ".slurm_alloc.json")
    store.path.write_text(content)
    with pytest.raises(StateFileError, match=reason):
        store.read()


def test_missing_file_reads_as_none_and_delete_is_idempotent(tmp_path: Path) -> None:
    store = StateStore(tmp_path / ".slurm_alloc.json")
    assert store.read() is None
    assert store.delete() is False
    store.write(AllocState(job_id="1", nodelist="n1", partition="p", account="a", nodes=1))
    assert store.delete() is True
    assert not store.exists()


def test_lock_excludes_another_process(tmp_path: Path) -> None:
    store = StateStore(tmp_path / ".slurm_alloc.json")
    code = textwrap.dedent(f"""
        import filelock, sys
        lock = filelock.FileLock({str(store.lock_path)!r}, timeout=0.2)
        try:
            lock.acquire()
        except filelock.Timeout:
            sys.exit(7)
        sys.exit(0)
    """)
    with store.locked():
        held = subprocess.run([sys.executable, "-c", code], timeout=30, check=False)
    free = subprocess.run([sys.executable, "-c", code], timeout=30, check=False)
    assert held.returncode == 7
    assert free.returncode == 0


def test_lock_timeout_is_a_clear_error(tmp_path: Path) -> None:
    from slurm_fsm.state import StateLockTimeout

    store = StateStore(tmp_path / ".slurm_alloc.json", lock_timeout_s=0.2)
    code = textwrap.dedent(f"""
        import filelock, time
        lock = filelock.FileLock({str(store.lock_path)!r})
        lock.acquire()
        print("held", flush=True)
        time.sleep(5)
    """)
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                          text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            with (pytest.raises(StateLockTimeout, match="another orchestrator has held"),
                  store.locked()):
                pass
        finally:
            holder.kill()


# --------------------------------------------------- bounded reads of regular files only


def test_fifo_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO with no writer: the open does not block, the read is refused."""
    store = StateStore(tmp_path / ".slurm_alloc.json")
    os.mkfifo(store.path)
    code = textwrap.dedent(f"""
        from pathlib import Path
        from slurm_fsm.errors import StateFileError
        from slurm_fsm.state import StateStore
        try:
            StateStore(Path({str(store.path)!r})).read()
        except StateFileError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=20, check=False)
    assert out.returncode == 0, out.stderr
    assert f"state file {store.path}: a FIFO, not a regular file" in out.stdout


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/null", "/dev/urandom"])
def test_devices_are_refused_without_reading_them(tmp_path: Path, target: str) -> None:
    store = StateStore(tmp_path / ".slurm_alloc.json")
    store.path.symlink_to(target)  # a link in the shared work_dirs is never followed
    with pytest.raises(StateFileError, match="a symbolic link"):
        store.read()
    store.path.unlink()
    os.mknod(store.path, 0o600 | stat.S_IFCHR, os.stat(target).st_rdev)  # the device itself
    with pytest.raises(StateFileError, match="a character device, not a regular file"):
        store.read()


def test_a_planted_link_is_neither_read_nor_written_through(tmp_path: Path) -> None:
    """Issue 20: the state file is read with O_NOFOLLOW and written by rename."""
    victim = tmp_path / "victim.json"
    victim.write_text('{"job_id": "1"}')
    store = StateStore(tmp_path / ".slurm_alloc.json")
    store.path.symlink_to(victim)
    with pytest.raises(StateFileError, match="a symbolic link"):
        store.read()
    store.write(AllocState(job_id="7", nodelist="n1", partition="p", account="a", nodes=1))
    assert victim.read_text() == '{"job_id": "1"}'
    assert not store.path.is_symlink()


def test_directory_and_oversized_files_are_refused(tmp_path: Path) -> None:
    store = StateStore(tmp_path / ".slurm_alloc.json")
    store.path.mkdir()
    with pytest.raises(StateFileError, match="a directory, not a regular file"):
        store.read()
    store.path.rmdir()
    store.path.write_bytes(b" " * (MAX_STATE_BYTES + 1))
    with pytest.raises(StateFileError, match="larger than any state file"):
        store.read()


@pytest.mark.parametrize(("content", "reason"), [
    (b'{"job_id": "\xff\xfe"}', "not UTF-8 text"),
    (b"[" * 60_000, "not valid JSON"),
])
def test_undecodable_files_are_corrupt(tmp_path: Path, content: bytes, reason: str) -> None:
    store = StateStore(tmp_path / ".slurm_alloc.json")
    store.path.write_bytes(content)
    with pytest.raises(StateFileError, match=reason):
        store.read()


@pytest.mark.parametrize("bad", ["-1", "--help", "12;rm", "12 13", "0", "$(id)", -1,
                                 # past what squeue reads (issue 43 item 8): squeue -j
                                 # 4294967295 says "Invalid job id", never "not found"
                                 "4294967295", "4294967294", "2147483648", "9999999999",
                                 "2147483648_1", "2147483648+1"])
def test_a_job_id_that_is_not_one_makes_the_file_corrupt(tmp_path: Path, bad: object) -> None:
    store = StateStore(tmp_path / ".slurm_alloc.json")
    data = json.loads(ORIGINAL)
    data["job_id"] = bad
    store.path.write_text(json.dumps(data))
    with pytest.raises(StateFileError, match="job_id: not a Slurm job id"):
        store.read()


def test_writable_problem(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "work_dirs" / ".slurm_alloc.json")
    assert store.writable_problem() is None  # the folder is created
    assert [p.name for p in store.path.parent.iterdir()] == []  # the probe is gone
    store.path.mkdir()
    assert store.writable_problem() == "is a directory, not a file"
    store.path.rmdir()
    os.mkfifo(store.path)  # replaceable by the atomic write: not a problem
    assert store.writable_problem() is None
    blocked = StateStore(tmp_path / "file" / "work_dirs" / ".slurm_alloc.json")
    (tmp_path / "file").write_text("a file where a folder should be")
    assert "cannot be created" in (blocked.writable_problem() or "")


# --------------------------------------------------------------- the CLI on such paths


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "job.slurm").write_text("#!/bin/bash\nsrun true\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "script_path": "job.slurm", "work_dir": "work", "model_name": "m",
        "workflow_type": "custom", "repo_root": ".",
        "slurm_params": {"partition": "debug", "account": "acct"},
    }))
    return subprocess.run([sys.executable, "-m", "slurm_fsm", args[0], str(spec), *args[1:],
                           "--backend", "fake"], capture_output=True, text=True, timeout=60,
                          check=False, cwd=tmp_path)


@pytest.mark.parametrize("command", ["run", "status", "release"])
def test_cli_does_not_hang_on_a_fifo_state_file(tmp_path: Path, command: str) -> None:
    state = tmp_path / "work_dirs" / ".slurm_alloc.fake.json"  # the fake backend's
    state.parent.mkdir()
    os.mkfifo(state)
    out = _cli(tmp_path, command)
    assert "a FIFO, not a regular file" in out.stderr
    assert "Traceback" not in out.stderr
    # status reports the unusable file as bad input; run and release go on without it
    assert out.returncode == (2 if command == "status" else 0), out.stderr


def test_cli_state_path_that_is_a_directory_is_an_error_before_slurm(tmp_path: Path) -> None:
    state = tmp_path / "work_dirs" / ".slurm_alloc.fake.json"  # the fake backend's
    state.mkdir(parents=True)
    out = _cli(tmp_path, "run", "--json")
    assert out.returncode == 3, out.stderr
    report = json.loads(out.stdout)
    assert report["status"] == "ERROR"
    assert "is a directory" in report["summary"] and "nothing was allocated" in report["summary"]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_plan_does_not_copy_what_is_not_a_state_file(tmp_path: Path, kind: str) -> None:
    state = tmp_path / "work_dirs" / ".slurm_alloc.json"
    state.parent.mkdir()
    if kind == "fifo":
        os.mkfifo(state)
    else:
        state.symlink_to("/dev/zero")
    out = _cli(tmp_path, "plan", "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["path"] == ["NoState", "Allocating", "Ready"]
    assert any("not a regular file" in w or "symbolic link" in w for w in plan["warnings"])


def test_threads_of_one_process_queue_for_the_lock_without_polling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs of one ``run_many`` are threads of one process, each with its own store
    of one state file: a thread that finds a sibling holding the lock waits on an
    in-process lock, woken at the sibling's release, instead of trying the file lock
    again every poll interval (filelock's 50 ms: most of a tiny job's step 0 then)."""
    import fcntl
    import threading
    import time

    path = tmp_path / ".slurm_alloc.json"
    first, second = StateStore(path), StateStore(path)
    tries: list[str] = []
    real_flock = fcntl.flock

    def flock(fd: int, op: int) -> None:
        tries.append(threading.current_thread().name)
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    waiting = threading.Event()
    order: list[str] = []

    def sibling() -> None:
        with second.locked(on_wait=lambda _m: waiting.set()):
            order.append("second")

    with first.locked():
        thread = threading.Thread(target=sibling, name="sibling")
        thread.start()
        assert waiting.wait(10), "the sibling did not find the lock held"
        time.sleep(0.3)  # a poller would try the file lock several times meanwhile
        order.append("first")
    thread.join(10)
    assert order == ["first", "second"]
    # the sibling took the file lock once (and released it), never tried it in vain
    assert tries.count("sibling") <= 2, tries


# ------------------------------------------- a filesystem whose locks do not work (issue 28)


def _flock_fails(monkeypatch: pytest.MonkeyPatch, store: StateStore, err: int) -> None:
    """flock on the lock file fails with ``err``, as on NFS without its lock daemon
    (ENOLCK) or a mount without flock (EOPNOTSUPP); a planted link gives ELOOP."""
    def acquire(*_a: object, **_k: object) -> None:
        raise OSError(err, os.strerror(err))
    monkeypatch.setattr(store._lock, "acquire", acquire)


@pytest.mark.parametrize("err", [errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS])
def test_a_filesystem_without_working_locks_is_a_warning_not_a_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    store = StateStore(tmp_path / ".slurm_alloc.json")
    _flock_fails(monkeypatch, store, err)
    ran = []
    with store.locked():
        ran.append(True)
        with store.locked():  # re-entrant (step 0's triggers inside prepare)
            ran.append(True)
    assert ran == [True, True]
    assert store.unlocked is not None and os.strerror(err) in store.unlocked
    assert "going on without it" in store.unlocked


def test_a_lock_that_fails_for_another_reason_is_still_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = StateStore(tmp_path / ".slurm_alloc.json")
    _flock_fails(monkeypatch, store, errno.ELOOP)
    with pytest.raises(StateFileError, match="cannot be taken"), store.locked():
        pytest.fail("ran without the lock")
    assert store.unlocked is None


def test_step_0_without_working_locks_goes_on_and_says_so(
        make_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_fsm.machine import AllocationMachine
    from slurm_fsm.step0.table import State
    from slurm_fsm.testing import FakeCluster

    fake = FakeCluster()
    spec = make_spec()
    store = StateStore(spec.state_path)
    _flock_fails(monkeypatch, store, errno.ENOLCK)
    m = AllocationMachine(spec, fake, clock=fake.clock, store=store)
    assert m.prepare().state is State.Ready
    assert [w for w in m.warnings if "cannot be taken on this filesystem" in w] == [
        store.unlocked]
    assert store.read() is not None  # the allocation is tracked all the same


def test_a_nested_entry_keeps_the_lock_until_the_outer_one_ends(tmp_path: Path) -> None:
    """Re-entrant in one thread (step 0's triggers inside prepare): the inner exit
    releases nothing; another thread (a sibling run) and another process get the lock
    only once the outer entry ends."""
    import subprocess
    import sys
    import threading

    path = tmp_path / ".slurm_alloc.json"
    store = StateStore(path)
    probe = ("import sys, filelock\n"
             f"l = filelock.FileLock({str(store.lock_path)!r})\n"
             "try:\n    l.acquire(timeout=0)\nexcept filelock.Timeout:\n    sys.exit(3)\n")

    def other_process_gets_it() -> bool:
        return subprocess.run([sys.executable, "-c", probe], timeout=60).returncode == 0

    got: list[str] = []

    def sibling_run() -> None:
        with StateStore(path).locked():
            got.append("in")

    sibling = threading.Thread(target=sibling_run)
    with store.locked():
        with store.locked():
            assert store.holds_lock()
        assert store.holds_lock()  # the inner exit released nothing
        assert not other_process_gets_it()
        sibling.start()
        sibling.join(0.3)
        assert got == []  # the sibling thread waits
    sibling.join(30)
    assert got == ["in"]
