"""slurm_fsm.report: the Report's JSON round trip, CLI exit codes and text rendering."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from slurm_fsm import report as report_module
from slurm_fsm.report import Report, format_seconds
from slurm_fsm.results import EXIT_CODES, Status

pytestmark = pytest.mark.usefixtures("golden_reports")

KEYS = [
    "status", "task_type", "mode", "job_id", "allocation_id", "slurm_state", "exit_code",
    "elapsed_s", "log_files", "work_dir", "summary", "errors", "warnings", "metrics",
    "diagnosis", "path", "notes", "log_head", "log_tail", "err_tail", "timings",
]


def full_report() -> Report:
    return Report(
        status=Status.FAILED,
        task_type="pytest",
        mode="one-shot",
        job_id="1234",
        allocation_id=None,
        slurm_state="FAILED",
        exit_code=1,
        elapsed_s=3723.4,
        log_files={"stdout": "/w/llama_1234.out", "stderr": "/w/llama_1234.err"},
        work_dir="/w",
        summary="FAILED: job 1234, exit code 1; 3 passed, 1 failed",
        errors=["FAILED tests/test_a.py::test_x - AssertionError", "srun: error: task 0"],
        warnings=["GPU processes found on n1: 77 python 1024 MiB."],
        metrics={"passed": 3, "failed": 1, "seconds": 12.5,
                 "success_hits": {"passed": 1}, "failure_hits": {"FAILED": 1},
                 "nested": {"list": [1, 2.5, None, "x"]}},
        diagnosis=[{"symptom": "exit 1 and FAILED", "cause": "the srun exited non-zero",
                    "advice": "read the .err file"}],
        path=["NoState", "OneShot"],
        notes=["persistent_mode=false: step 0 skipped"],
        log_head=["== test session starts =="],
        log_tail=["== 1 failed, 3 passed in 12.50s =="],
        err_tail=["srun: error: task 0"],
        timings={"submit_s": 0.2, "run_s": 3723.4, "total_s": 3724.0},
    )


def test_to_dict_has_every_key_in_order() -> None:
    d = full_report().to_dict()
    assert list(d) == KEYS
    assert d["status"] == "FAILED"
    assert [f.name for f in attrs.fields(Report)] == KEYS


def test_round_trip_dict_and_json() -> None:
    r = full_report()
    assert Report.from_dict(r.to_dict()) == r
    text = r.to_json()
    assert json.loads(text) == r.to_dict()
    assert Report.from_json(text) == r
    assert "\n  " in text
    assert "\n" not in r.to_json(indent=None)


@pytest.mark.parametrize("status", list(Status))
def test_every_status_round_trips_and_maps_to_an_exit_code(status: Status) -> None:
    r = Report(status=status, task_type="custom", mode="persistent")
    d = r.to_dict()
    assert d["status"] == status.name
    back = Report.from_dict(json.loads(json.dumps(d)))
    assert back == r
    assert back.exit_code_for_cli == EXIT_CODES[status]


def test_exit_codes_for_cli() -> None:
    def code(s: Status) -> int:
        return Report(status=s, task_type="custom", mode="persistent").exit_code_for_cli

    assert code(Status.PASSED) == 0
    assert code(Status.RELEASED) == 0
    assert code(Status.HANG_DETECTED) == 1
    assert code(Status.ERROR) == 3
    assert code(Status.BUILD_FAILED) == 3


def test_defaults_are_not_shared() -> None:
    a = Report(status=Status.PASSED, task_type="custom", mode="persistent")
    b = Report(status=Status.PASSED, task_type="custom", mode="persistent")
    a.errors.append("x")
    a.timings["t"] = 1.0
    assert b.errors == [] and b.timings == {}
    assert a.log_files == {"stdout": None, "stderr": None}


def test_from_dict_ignores_unknown_keys_and_fills_defaults() -> None:
    r = Report.from_dict({"status": "passed", "task_type": "eval", "mode": "release",
                          "future_key": 1, "exit_code": "0", "timings": {"a": 2}})
    assert r.status is Status.PASSED
    assert r.exit_code == 0
    assert r.timings == {"a": 2.0}
    assert r.errors == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"status": "GREAT", "task_type": "x", "mode": "one-shot"}, "status: must be one of"),
        ({"status": "PASSED", "task_type": "x"}, "mode: required field missing"),
        ({"status": "PASSED", "task_type": "x", "mode": "m", "errors": "notalist"}, "errors"),
        ({"status": "PASSED", "task_type": "x", "mode": "m", "exit_code": "abc"}, "exit_code"),
        ([1, 2], "JSON object"),
    ],
)
def test_from_dict_rejects_bad_input(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Report.from_dict(data)


def test_to_json_survives_odd_metric_values() -> None:
    from pathlib import Path

    r = Report(status=Status.PASSED, task_type="custom", mode="persistent",
               metrics={"where": Path("/w/x")})
    assert json.loads(r.to_json())["metrics"]["where"] == "/w/x"


def test_render_text_failed() -> None:
    text = full_report().render_text()
    assert text.splitlines()[0] == "FAILED  (pytest, one-shot)"
    for needle in (
        "job:         job 1234",
        "exit code:   1 (Slurm state FAILED)",
        "elapsed:     1h 02m 03s",
        "log:         /w/llama_1234.out",
        "err:         /w/llama_1234.err",
        "summary:     FAILED: job 1234, exit code 1; 3 passed, 1 failed",
        "  warnings:\n    - GPU processes found on n1",
        "  errors:\n    - FAILED tests/test_a.py::test_x - AssertionError",
        "  diagnosis:\n    - exit 1 and FAILED: the srun exited non-zero -> read the .err file",
    ):
        assert needle in text
    assert str(full_report()) == text


def test_render_text_minimal_and_persistent() -> None:
    r = Report(status=Status.RELEASED, task_type="custom", mode="release",
               allocation_id="77", summary="Allocation 77 released.")
    assert r.render_text() == (
        "RELEASED  (custom, release)\n"
        "  job:         allocation 77\n"
        "  summary:     Allocation 77 released."
    )
    same_log = Report(status=Status.PASSED, task_type="pytest", mode="persistent",
                      log_files={"stdout": "/w/m_pytest.log", "stderr": "/w/m_pytest.log"},
                      slurm_state="COMPLETED")
    text = same_log.render_text()
    assert "err:" not in text
    assert "exit code:   unknown (Slurm state COMPLETED)" in text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0.0s"), (12.34, "12.3s"), (59.9, "59.9s"), (60, "1m 00s"), (125, "2m 05s"),
     (3723, "1h 02m 03s"), (90061, "25h 01m 01s")],
)
def test_format_seconds(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_public_names() -> None:
    for name in report_module.__all__:
        assert hasattr(report_module, name)


# ---------------------------------------------------- reports that explain themselves
def test_report_is_frozen_and_keyword_only() -> None:
    r = Report(status=Status.PASSED, task_type="custom", mode="persistent")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        r.summary = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Report(Status.PASSED, "custom", "persistent")  # type: ignore[misc]


def _spec(tmp_path: Any, **over: Any) -> Any:
    from slurm_fsm.spec import JobSpec

    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\n#SBATCH --output=llama_%j.out\n#SBATCH -t 00:10:00\n"
                      "srun x\n")
    data = {"repo_root": str(tmp_path), "model_name": "llama", "workflow_type": "pytest",
            "script_path": str(script), "work_dir": str(tmp_path / "work"),
            "slurm_params": {"partition": "batch", "account": "acct", "nodes": 1,
                             "time_limit": "01:00:00"},
            "monitor_timeout_seconds": 600, **over}
    return JobSpec.from_dict(data)


def _run(tmp_path: Any, lines: tuple[str, ...], exit_code: int = 0, hang: bool = False,
         **over: Any) -> Report:
    from slurm_fsm.executor import Executor
    from slurm_fsm.testing import FakeCluster, FakeScript

    fake = FakeCluster()
    spec = _spec(tmp_path, **over)
    fake.script(spec.script_path, FakeScript(lines=lines, exit_code=exit_code, hang=hang))
    return Executor(spec, fake, clock=fake.clock).run()


@pytest.mark.parametrize(("lines", "exit_code", "hang", "over", "status", "starts"), [
    (("Traceback (most recent call last)", "=== 2 passed in 1.00s ==="), 0, False,
     {"failure_patterns": "Traceback"}, Status.FAILED,
     "FAILED: failure pattern matched: 'Traceback' (1 lines); "),
    (("=== 2 passed in 1.00s ===",), 3, False, {}, Status.FAILED, "FAILED: exit code 3; "),
    (("=== 1 failed, 2 passed in 1.00s ===",), 1, False, {}, Status.FAILED,
     "FAILED: pytest: 1 failed, 0 errors; "),
    (("=== 2 passed in 1.00s ===",), 0, False, {"success_patterns": "ALL GOOD"},
     Status.FAILED, "FAILED: no success pattern found in the log: 'ALL GOOD'; "),
    (("step 1", "NCCL watchdog: Hang detected on rank 3"), 0, True, {}, Status.HANG_DETECTED,
     "HANG_DETECTED: the log reported a hang: 'NCCL watchdog: Hang detected on rank 3'; "),
    (("step 1",) * 2000, 0, False, {"monitor_timeout_seconds": 30}, Status.TIMEOUT,
     "TIMEOUT: monitor_timeout_seconds (30 s) passed before the job ended; "),
])
def test_a_failed_summary_starts_with_the_deciding_reason(
        tmp_path: Any, lines: tuple[str, ...], exit_code: int, hang: bool,
        over: dict[str, Any], status: Status, starts: str) -> None:
    report = _run(tmp_path, lines, exit_code, hang, **over)
    assert report.status is status, report.summary
    assert report.summary.startswith(starts), report.summary


def test_a_passed_summary_is_unchanged(tmp_path: Any) -> None:
    report = _run(tmp_path, ("=== 2 passed in 1.00s ===",))
    assert report.status is Status.PASSED
    assert report.summary == (f"PASSED: step on allocation {report.allocation_id}, exit code 0; "
                              "2 passed in 1s")


def _documented_timings() -> set[str]:
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "report.md").read_text()
    section = text.split("## Timings", 1)[1].split("\n## ", 1)[0]
    import re

    return set(re.findall(r"^\| `(\w+_s)` \|", section, re.M))


def test_timings_are_documented_as_they_are_and_on_the_injected_clock(tmp_path: Any) -> None:
    """Every key is one of docs/report.md's, and every value is on the executor's clock:
    on the fake clock a run of 20 lines of 1 s takes 20 s, not the real milliseconds."""
    documented = _documented_timings()
    assert documented >= {"total_s", "run_s"}
    persistent = _run(tmp_path / "p", tuple(f"line {i}" for i in range(20)))
    one_shot = _run(tmp_path / "o", tuple(f"line {i}" for i in range(20)),
                    persistent_mode=False, log_file_pattern="llama_%j.out")
    for report in (persistent, one_shot):
        assert report.status is Status.PASSED, report.summary
        assert set(report.timings) <= documented, report.timings
        assert report.timings["run_s"] >= 20 and report.timings["total_s"] >= 20
        assert report.timings["total_s"] >= report.timings["run_s"] - 1e-3
    assert set(persistent.timings) == {"step0_s", "start_s", "run_s", "total_s"}
    assert set(one_shot.timings) == {"run_s", "total_s"}


def test_timings_are_rounded_to_the_millisecond_in_the_report_and_its_json(
        tmp_path: Any) -> None:
    """A clock difference carries 17 digits (0.1 + 0.2 = 0.30000000000000004): the
    report keeps milliseconds, so its JSON and text never show the noise."""
    import json
    import re

    r = Report(status=Status.PASSED, task_type="custom", mode="persistent",
               timings={"run_s": 0.1 + 0.2, "total_s": 1 / 3})
    assert r.timings == {"run_s": 0.3, "total_s": 0.333}
    assert json.loads(r.to_json())["timings"] == {"run_s": 0.3, "total_s": 0.333}
    assert Report.from_json(r.to_json()) == r
    real = _run(tmp_path, ("=== 2 passed in 1.00s ===",))
    for key, value in json.loads(real.to_json())["timings"].items():
        assert re.fullmatch(r"\d+(\.\d{1,3})?", repr(value)), (key, value)
    with pytest.raises(ValueError, match="timings"):
        Report.from_dict({"status": "PASSED", "task_type": "x", "mode": "y",
                          "timings": {"a": "soon"}})
