"""The warmer gets its spec privately (issue 43, item 1).

The spawner once wrote the successor's spec to ``work_dirs/.slurm_fsm_warmer.spec.json``
and started ``python -m slurm_fsm.warmer PATH``, which read the file again by path: a
member of the group that can write a shared ``work_dirs`` renamed their own spec over it
in the half second before the warmer read it, and the warmer (root's) mounted their
folder over ``repo_root`` and ran their build backend as uid 0. The spec now goes
through the warmer's stdin (a pipe only the spawner holds), bounded; nothing of it is
written into ``work_dirs`` and no path to a spec is accepted.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from slurm_fsm import warmer
from slurm_fsm.spec import JobSpec

from conftest import SpecFactory


def _wait_for(path: Path, text: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in (got := path.read_text()):
            return got
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {path}: "
                         f"{path.read_text() if path.exists() else '(no file)'}")


def test_the_spawned_warmer_reads_the_spec_it_was_given_not_a_file_in_work_dirs(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    spec = make_spec(alloc_job_name="victim-succ")
    state = tmp_path / "work_dirs" / ".slurm_alloc.json"
    state.parent.mkdir()
    # another user's spec, planted where the warmer's spec once was
    planted = make_spec(alloc_job_name="attacker")
    (state.parent / ".slurm_fsm_warmer.spec.json").write_text(
        json.dumps(planted.to_dict()))
    pid = warmer.spawner(state)(spec)
    assert pid is not None
    log = _wait_for(state.with_name(".slurm_fsm_warmer.log"), f"warmer {pid}: ")
    log = _wait_for(state.with_name(".slurm_fsm_warmer.log"), "NoState")
    assert f"spec {warmer.spec_digest(spec)}" in log, log
    assert "job victim-succ" in log and "attacker" not in log, log
    # nothing of the spec written beside the state file
    assert sorted(p.name for p in state.parent.iterdir()) == [
        ".slurm_alloc.successor.json.lock", ".slurm_fsm_warmer.log",
        ".slurm_fsm_warmer.spec.json"]
    assert json.loads((state.parent / ".slurm_fsm_warmer.spec.json").read_text()) == \
        planted.to_dict()  # untouched


def test_the_warmer_takes_no_spec_path(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text("{}")
    assert warmer.main([str(spec_file), str(tmp_path / ".slurm_alloc.json")]) == 2
    assert "usage" in capsys.readouterr().err


def test_a_spec_on_stdin_past_the_bound_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    big = io.BytesIO(b"{" + b" " * warmer.SPEC_LIMIT + b"}")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(big))
    assert warmer.main([str(tmp_path / ".slurm_alloc.json")]) == 2
    assert "too big" in capsys.readouterr().err


def test_the_digest_names_the_spec(make_spec: SpecFactory) -> None:
    a, b = make_spec(alloc_job_name="a"), make_spec(alloc_job_name="b")
    assert warmer.spec_digest(a) == warmer.spec_digest(JobSpec.from_dict(a.to_dict()))
    assert warmer.spec_digest(a) != warmer.spec_digest(b)
