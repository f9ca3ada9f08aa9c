"""Issue 39's "``logs`` without ``-f`` answers within 0.5 s in any state": the command
reads the run's files as plain JSON (slurm_fsm.runlog), importing neither the run's
classes nor the report's converter nor any backend, and it names the log the full
path (:attr:`slurm_fsm.detach.RunView.log`) names, in every state of a run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from slurm_fsm.detach import find
from slurm_fsm.report import Report, Status
from slurm_fsm.runlog import log_of, where
from slurm_fsm.runowner import Owner, OwnerRecord, RunFiles, RunPhase, SavedReport

RUN = "r0123456789ab"

#: What ``logs`` must not load: the run's classes, the report's converter, the spec,
#: any backend (a Slurm command), the run paths (issue 42 item 5).
HEAVY = ("attrs", "slurm_fsm.detach", "slurm_fsm.runowner", "slurm_fsm.report", "slurm_fsm.spec",
         "slurm_fsm.backend", "slurm_fsm.subprocess_backend", "slurm_fsm.slurmcli",
         "slurm_fsm.executor", "slurm_fsm.oneshot", "slurm_fsm.handoff",
         "slurm_fsm.history", "slurm_fsm.machine", "slurm_fsm.persistent", "cattrs")


def _record(repo: Path, *, fake: bool = False, **over: object) -> RunFiles:
    name = ".slurm_alloc.fake.json" if fake else ".slurm_alloc.json"
    files = RunFiles(repo / "work_dirs" / name)
    rec = OwnerRecord.new(RUN, Owner.SUPERVISOR, mode="persistent", spec_path="spec.json",
                          spec={})
    files.write_owner(attrs.evolve(rec, **over))
    return files


def _saved(files: RunFiles, stdout: str | None) -> None:
    report = Report(status=Status.PASSED, task_type="pytest", exit_code=0, mode="persistent",
                    log_files={"stdout": stdout} if stdout else {})
    files.save_report(SavedReport(run_id=RUN, report=report))


def _starting(repo: Path) -> None:
    _record(repo, progress=str(repo / "progress.out"))


def _running(repo: Path) -> None:
    _record(repo, progress=str(repo / "progress.out"), log=str(repo / "job.out"),
            phase=RunPhase.RUNNING)


def _done(repo: Path) -> None:
    _saved(_record(repo, log=str(repo / "job.out"), phase=RunPhase.RUNNING),
           str(repo / "job.out"))


def _done_record_gone(repo: Path) -> None:
    files = _record(repo)
    _saved(files, str(repo / "job.out"))
    files.owner_path(RUN).unlink()


def _done_without_log(repo: Path) -> None:
    _saved(_record(repo, progress=str(repo / "progress.out")), None)


def _fake_backends(repo: Path) -> None:
    _record(repo, fake=True, log=str(repo / "fake.out"))


def _not_started(repo: Path) -> None:
    _record(repo)


def _lost(repo: Path) -> None:  # its owner is gone (another start time), no report
    _record(repo, pid_ticks=1, log=str(repo / "job.out"), phase=RunPhase.RUNNING)


def _lost_before_its_job(repo: Path) -> None:
    _record(repo, pid_ticks=1)


def _another_host(repo: Path) -> None:
    _record(repo, host="login-b", boot_id="other", phase=RunPhase.RUNNING,
            log=str(repo / "job.out"))


STATES = [_starting, _running, _done, _done_record_gone, _done_without_log,
          _fake_backends, _not_started, _lost, _lost_before_its_job, _another_host]


@pytest.mark.parametrize("state", STATES, ids=[s.__name__.strip("_") for s in STATES])
def test_the_fast_path_names_the_log_the_full_path_names(tmp_path: Path, state: object
                                                         ) -> None:
    assert callable(state)
    state(tmp_path)
    view = find(tmp_path, RUN)
    assert where(tmp_path, RUN) == (view.log, view.state)
    assert log_of(tmp_path, RUN) == view.log


def test_no_run_and_no_run_id_name_no_log(tmp_path: Path) -> None:
    assert log_of(tmp_path, RUN) is None
    assert log_of(tmp_path, "../../etc/passwd") is None


def _logs(repo: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``slurm-fsm logs RUN`` in ``repo``, and the modules it imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "slurm_fsm", "logs", RUN],
                          cwd=repo, capture_output=True, text=True, timeout=120, check=False)
    loaded = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
              if line.startswith("import time:")}
    assert "slurm_fsm.runlog" in loaded  # the measurement works
    return proc, loaded


def test_logs_prints_the_log_importing_nothing_heavy(tmp_path: Path) -> None:
    _running(tmp_path)
    (tmp_path / "job.out").write_text("line 1\nline 2\n")
    proc, loaded = _logs(tmp_path)
    assert proc.returncode == 0 and proc.stdout == "line 1\nline 2\n", proc.stderr
    assert sorted(set(HEAVY) & loaded) == []


@pytest.mark.parametrize(("state", "said"), [(_not_started, "no log yet (starting;"),
                                             (_lost_before_its_job, "no log yet (lost;")])
def test_logs_of_a_run_without_a_log_says_its_state_importing_nothing_heavy(
        tmp_path: Path, state: object, said: str) -> None:
    assert callable(state)
    state(tmp_path)
    proc, loaded = _logs(tmp_path)
    assert proc.returncode == 0 and proc.stdout == "" and said in proc.stderr, proc.stderr
    assert sorted(set(HEAVY) & loaded) == []
