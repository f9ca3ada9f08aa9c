"""slurm_fsm.results: parsers on literal log text, every status branch, every diagnosis row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurm_fsm import results
from slurm_fsm.convert import converter
from slurm_fsm.results import (
    EXIT_CODES,
    Status,
    decide,
    diagnose,
    errors_from,
    normalize_slurm_state,
    parse_benchmark,
    parse_custom,
    parse_eval,
    parse_pytest,
)
from slurm_fsm.spec import WorkflowType
from slurm_fsm.workflows import workflow

DATA = Path(__file__).parent / "data" / "logs"


def lines_of(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


# ---------------------------------------------------------------------- pytest
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("==== 3 passed, 1 failed, 2 skipped, 1 error in 12.34s ====",
         {"passed": 3, "failed": 1, "skipped": 2, "errors": 1, "seconds": 12.34}),
        ("5 passed in 0.50s", {"passed": 5, "seconds": 0.5}),
        ("1 failed, 2 passed, 3 warnings in 1:02:03",
         {"failed": 1, "passed": 2, "warnings": 3, "seconds": 3723.0}),
        ("= 2 errors, 1 warning in 3.00s =", {"errors": 2, "warnings": 1, "seconds": 3.0}),
        ("== 1 xfailed, 1 xpassed, 4 deselected, 1 rerun in 0.1s ==",
         {"xfailed": 1, "xpassed": 1, "deselected": 4, "rerun": 1, "seconds": 0.1}),
        ("===== 10 passed in 3725.01s (1:02:05) =====", {"passed": 10, "seconds": 3725.01}),
        ("============ no tests ran in 0.01s ============", {"seconds": 0.01}),
        ("0: ==== 2 passed in 1.5s ====", {"passed": 2, "seconds": 1.5}),
        ("\x1b[31m\x1b[1m1 failed\x1b[0m, \x1b[32m2 passed\x1b[0m\x1b[31m in 0.12s\x1b[0m",
         {"failed": 1, "passed": 2, "seconds": 0.12}),
        ("7 passed in 2:03", {"passed": 7, "seconds": 123.0}),
    ],
)
def test_parse_pytest_summary_forms(line: str, expected: dict[str, Any]) -> None:
    assert parse_pytest(["some output", line, ""]) == expected


def test_parse_pytest_uses_last_summary() -> None:
    lines = ["== 1 failed in 1.00s ==", "rerunning...", "== 2 passed in 2.00s ==", "bye"]
    assert parse_pytest(lines) == {"passed": 2, "seconds": 2.0}


def test_parse_pytest_ignores_lookalikes() -> None:
    lines = ["downloaded 3 files in 2.5s", "passed in 1s", "3 passed", "1 apples in 2s"]
    assert parse_pytest(lines) == {}


def test_parse_pytest_fixture_file() -> None:
    got = parse_pytest(lines_of("pytest_failed.log"))
    assert got == {"failed": 1, "passed": 4, "skipped": 1, "warnings": 2, "errors": 1,
                   "seconds": 12.34}


# ------------------------------------------------------------------------ eval
def test_parse_eval_plain_values() -> None:
    got = parse_eval(["accuracy: 0.87", "Accuracy: 87.5", "... accuracy: 0.5%", "accuracy=1e-1"])
    assert got == {"accuracy": [0.87, 87.5, 0.5, 0.1], "scores": {"accuracy": 0.1}}
    assert "threshold_not_met" not in got


def test_parse_eval_task_names() -> None:
    got = parse_eval([
        "gsm8k accuracy: 71.2",
        "[TRT-LLM] [I] lm-eval mmlu average accuracy: 68.5",
        "[TRT-LLM] [I] accuracy: 0.9",
        "Final accuracy: 0.7",
        "Train accuracy: 0.91, Test accuracy: 0.89",
        "gsm8k accuracy: 72.0",
    ])
    assert got["accuracy"] == [71.2, 68.5, 0.9, 0.7, 0.91, 0.89, 72.0]
    assert got["accuracy_by_task"] == {"gsm8k": 72.0, "mmlu": 68.5, "Train": 0.91, "Test": 0.89}
    assert got["scores"] == {"gsm8k accuracy": 72.0, "mmlu accuracy": 68.5, "accuracy": 0.7,
                             "Train accuracy": 0.91, "Test accuracy": 0.89}


def test_parse_eval_not_accuracy_lookalikes() -> None:
    got = parse_eval(["val_accuracy: 0.3", "accuracy_threshold: 70", "Accuracy threshold: 70",
                      "--check_accuracy --accuracy_threshold 70"])
    assert got == {}  # no empty list: an eval's figures are in scores, or nowhere


def test_parse_eval_threshold_from_traceback_fixture() -> None:
    got = parse_eval(lines_of("eval_threshold.log"))
    assert got["accuracy"] == [65.12, 68.66]
    assert got["accuracy_by_task"] == {"gsm8k": 65.12, "MMLU": 68.66}
    assert got["threshold_not_met"] is True


def test_parse_eval_threshold_one_line() -> None:
    lines = ["accuracy: 0.5", "AssertionError: accuracy 0.5 is below threshold 0.7"]
    got = parse_eval(lines)
    assert got == {"accuracy": [0.5], "scores": {"accuracy": 0.5}, "threshold_not_met": True}


def test_parse_eval_threshold_pytest_style() -> None:
    lines = ["FAILED tests/accuracy/test_llm.py::TestLlama::test_check_accuracy - AssertionError"]
    assert parse_eval(lines)["threshold_not_met"] is True


def test_parse_eval_other_assertion_is_not_threshold() -> None:
    lines = [
        "[I] starting eval with --check_accuracy",
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in load',
        "    assert os.path.exists(path)",
        "AssertionError",
        "accuracy: 0.9",
    ]
    got = parse_eval(lines)
    assert "threshold_not_met" not in got
    assert got["accuracy"] == [0.9]


def test_parse_eval_other_exception_after_accuracy_frame() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in check_accuracy',
        "    score = compute()",
        "RuntimeError: boom",
    ]
    assert "threshold_not_met" not in parse_eval(lines)


def test_parse_eval_srun_labelled_traceback() -> None:
    lines = [
        "0: Traceback (most recent call last):",
        '0:   File "e.py", line 9, in check_accuracy',
        "0:     assert acc > thr",
        "0: AssertionError",
    ]
    assert parse_eval(lines)["threshold_not_met"] is True


# ------------------------------------------------------------------- benchmark
def test_parse_benchmark_serving(tmp_path: Path) -> None:
    got = parse_benchmark(lines_of("benchmark_serving.log"), tmp_path)
    assert got["throughput"] == {
        "Request throughput (req/s)": 8.10,
        "Output token throughput (tok/s)": 1234.5,
        "Total Token throughput (tok/s)": 2345.6,
    }
    assert got["latency"] == {
        "Mean TTFT (ms)": 45.67,
        "Median TTFT (ms)": 40.12,
        "P99 TTFT (ms)": 120.3,
        "Mean TPOT (ms)": 12.3,
        "Mean ITL (ms)": 11.9,
    }
    assert got["done_marker"] is None


def test_parse_benchmark_trtllm_bench(tmp_path: Path) -> None:
    (tmp_path / "8_done_llama.txt").write_text("")
    got = parse_benchmark(lines_of("benchmark_trtllm_bench.log"), tmp_path)
    assert got["throughput"] == {
        "Request Throughput (req/sec)": 12.3,
        "Total Output Throughput (tokens/sec)": 4567.8,
        "Total Token Throughput (tokens/sec)": 9000.5,
    }
    assert got["latency"] == {
        "Total Latency (ms)": 81234.56,
        "Average request latency (ms)": 45.6,
        "[Latency] P50": 44.1,
        "[Latency] P99": 78.9,
        "[Latency] AVERAGE": 45.6,
    }
    assert got["done_marker"] == "8_done_llama.txt"


def test_parse_benchmark_prefixes_and_units(tmp_path: Path) -> None:
    lines = [
        "[TRT-LLM] [I] Token Throughput (tokens/sec): 4567.8",
        "0: Average latency (ms): 45.6",
        "2025-01-01 10:00:00 INFO: Output token throughput (tok/s): 123.4",
        "generation throughput: 99 tokens/s",
        "E2E latency = 5",  # no colon: not a figure
        "Benchmark duration (s): 12",
        "latency: n/a",
    ]
    got = parse_benchmark(lines, tmp_path)
    assert got["throughput"] == {
        "Token Throughput (tokens/sec)": 4567.8,
        "Output token throughput (tok/s)": 123.4,
        "generation throughput": 99.0,
    }
    assert got["latency"] == {"Average latency (ms)": 45.6}


def test_parse_benchmark_done_marker_newest(tmp_path: Path) -> None:
    import os

    a, b = tmp_path / "8_done_a.txt", tmp_path / "8_done_b.txt"
    a.write_text("")
    b.write_text("")
    os.utime(a, (2_000_000_000, 2_000_000_000))
    os.utime(b, (1_000_000_000, 1_000_000_000))
    (tmp_path / "7_done_c.txt").write_text("")
    assert parse_benchmark([], tmp_path)["done_marker"] == "8_done_a.txt"
    assert parse_benchmark([], tmp_path / "missing")["done_marker"] is None


# ---------------------------------------------------------------------- custom
def test_parse_custom_last_ten() -> None:
    lines = [f"line {i}" for i in range(25)]
    assert parse_custom(lines) == {"last_lines": lines[-10:]}
    assert parse_custom(["a"]) == {"last_lines": ["a"]}


def test_each_workflow_parses_its_own_lines(tmp_path: Path) -> None:
    lines = ["accuracy: 0.5", "2 passed in 1.0s", "Request throughput (req/s): 3"]
    assert workflow(WorkflowType.PYTEST).parse(lines, tmp_path) == {"passed": 2, "seconds": 1.0}
    assert workflow(WorkflowType.EVAL).parse(lines, tmp_path) == {"accuracy": [0.5],
                                                                "scores": {"accuracy": 0.5}}
    assert workflow(WorkflowType.BENCHMARK).parse(lines, tmp_path)["throughput"] == {
        "Request throughput (req/s)": 3.0}
    assert workflow(WorkflowType.CUSTOM).parse(lines, tmp_path) == {"last_lines": lines}


# ---------------------------------------------------------------------- status
def test_status_values_and_exit_codes() -> None:
    assert all(s.value == s.name for s in Status)
    assert set(EXIT_CODES) == set(Status)
    assert {s for s, c in EXIT_CODES.items() if c == 0} == {Status.PASSED, Status.RELEASED}
    assert {s for s, c in EXIT_CODES.items() if c == 3} == {Status.ERROR, Status.BUILD_FAILED}
    assert {s for s, c in EXIT_CODES.items() if c == 1} == {
        Status.FAILED, Status.TIMEOUT, Status.HANG_DETECTED, Status.OUT_OF_MEMORY,
        Status.CANCELLED}


def test_status_converter_hooks() -> None:
    assert converter.unstructure(Status.HANG_DETECTED) == "HANG_DETECTED"
    assert converter.structure("timeout", Status) is Status.TIMEOUT
    assert converter.structure(Status.PASSED, Status) is Status.PASSED
    with pytest.raises(ValueError, match="must be one of"):
        converter.structure("GREAT", Status)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("CANCELLED+", "CANCELLED"), ("CANCELLED by 0", "CANCELLED"), (" timeout ", "TIMEOUT"),
     ("", None), (None, None), ("OUT_OF_MEMORY", "OUT_OF_MEMORY")],
)
def test_normalize_slurm_state(text: str | None, expected: str | None) -> None:
    assert normalize_slurm_state(text) == expected


def status_of(**overrides: Any) -> Status:
    kwargs: dict[str, Any] = {
        "exit_code": 0, "slurm_state": "COMPLETED", "hang": False, "timed_out": False,
        "success_hits": {}, "failure_hits": {}, "success_patterns": [],
        "workflow_type": WorkflowType.CUSTOM, "metrics": {},
    }
    kwargs.update(overrides)
    return decide(**kwargs).status


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, Status.PASSED),
        ({"hang": True, "timed_out": True, "slurm_state": "TIMEOUT"}, Status.HANG_DETECTED),
        ({"timed_out": True, "slurm_state": "OUT_OF_MEMORY"}, Status.TIMEOUT),
        ({"slurm_state": "TIMEOUT", "exit_code": 0}, Status.TIMEOUT),
        ({"slurm_state": "DEADLINE"}, Status.TIMEOUT),
        ({"slurm_state": "OUT_OF_MEMORY", "exit_code": 0}, Status.OUT_OF_MEMORY),
        ({"slurm_state": "CANCELLED+", "exit_code": 0}, Status.CANCELLED),
        ({"slurm_state": "CANCELLED by 1000"}, Status.CANCELLED),
        ({"slurm_state": "PREEMPTED"}, Status.CANCELLED),
        ({"slurm_state": "REVOKED"}, Status.CANCELLED),
        ({"slurm_state": "NODE_FAIL", "exit_code": 0}, Status.FAILED),
        ({"slurm_state": "BOOT_FAIL"}, Status.FAILED),
        ({"slurm_state": "FAILED", "exit_code": 1}, Status.FAILED),
        ({"slurm_state": None, "exit_code": 2}, Status.FAILED),
        ({"slurm_state": None, "exit_code": None}, Status.ERROR),
        ({"slurm_state": None, "exit_code": None, "failure_hits": {"Traceback": 1}},
         Status.FAILED),
        ({"slurm_state": "COMPLETED", "exit_code": None}, Status.PASSED),
        ({"slurm_state": None, "exit_code": 0}, Status.PASSED),
        ({"failure_hits": {"Traceback": 2}}, Status.FAILED),
        ({"failure_hits": {"Traceback": 0}}, Status.PASSED),
        ({"success_patterns": ["ALL OK"], "success_hits": {"ALL OK": 0}}, Status.FAILED),
        ({"success_patterns": ["ALL OK"], "success_hits": {}}, Status.FAILED),
        ({"success_patterns": ["A", "B"], "success_hits": {"A": 0, "B": 1}}, Status.PASSED),
        ({"success_patterns": ["A"], "success_hits": {"A": 3}, "exit_code": 1}, Status.FAILED),
        ({"workflow_type": WorkflowType.EVAL, "metrics": {"threshold_not_met": True}},
         Status.FAILED),
        ({"workflow_type": WorkflowType.EVAL, "metrics": {"accuracy": [0.9]}}, Status.PASSED),
        ({"workflow_type": WorkflowType.PYTEST, "metrics": {"passed": 3, "failed": 1}},
         Status.FAILED),
        ({"workflow_type": WorkflowType.PYTEST, "metrics": {"passed": 3, "errors": 1}},
         Status.FAILED),
        ({"workflow_type": WorkflowType.PYTEST, "metrics": {"passed": 3}}, Status.PASSED),
        ({"workflow_type": WorkflowType.PYTEST, "metrics": {"passed": 3}, "exit_code": 1},
         Status.FAILED),
        ({"workflow_type": WorkflowType.CUSTOM, "metrics": {"failed": 3}}, Status.PASSED),
    ],
)
def test_decide_branches(overrides: dict[str, Any], expected: Status) -> None:
    assert status_of(**overrides) is expected


def test_decide_gives_a_reason() -> None:
    d = decide(exit_code=0, slurm_state=None, hang=False, timed_out=False, success_hits={},
               failure_hits={"NaN": 4}, success_patterns=[],
               workflow_type=WorkflowType.CUSTOM, metrics={})
    assert d.status is Status.FAILED
    assert "'NaN' (4 lines)" in d.reason


# ------------------------------------------------------------------- diagnosis
def rows_of(status: Status, **kw: Any) -> list[dict[str, str]]:
    args: dict[str, Any] = {"exit_code": None, "slurm_state": None, "log_empty": False,
                            "log_lines": []}
    args.update(kw)
    return diagnose(status, **args)


def symptoms(rows: list[dict[str, str]]) -> list[str]:
    return [r["symptom"] for r in rows]


def test_diagnose_rows_have_three_keys() -> None:
    for row in rows_of(Status.TIMEOUT, slurm_state="TIMEOUT", log_empty=True):
        assert set(row) == {"symptom", "cause", "advice"}


def test_diagnose_passed_and_released_are_empty() -> None:
    assert rows_of(Status.PASSED, log_empty=True) == []
    assert rows_of(Status.RELEASED) == []


def test_diagnose_timeout_slurm_and_monitor() -> None:
    slurm = rows_of(Status.TIMEOUT, slurm_state="TIMEOUT")
    assert slurm[0]["cause"] == "over the time limit"
    assert "raise the time limit" in slurm[0]["advice"]
    monitor = rows_of(Status.TIMEOUT)
    assert "monitor_timeout_seconds" in monitor[0]["advice"]


def test_diagnose_oom() -> None:
    rows = rows_of(Status.OUT_OF_MEMORY, slurm_state="OUT_OF_MEMORY")
    assert rows == [{"symptom": "OUT_OF_MEMORY", "cause": "OOM on a node",
                     "advice": "lower the batch size"}]


def test_diagnose_exit_nonzero_failed() -> None:
    rows = rows_of(Status.FAILED, exit_code=1, slurm_state="FAILED")
    assert rows[0] == {"symptom": "exit 1 and FAILED",
                       "cause": "the job's script (or a step of it) exited non-zero",
                       "advice": "read the log tail (one-shot mode: the .err file)"}
    assert rows_of(Status.FAILED, exit_code=0) == []
    # a script that exits 1 did not fail "to reach its end": the exit row says it
    both = rows_of(Status.FAILED, exit_code=1, slurm_state="FAILED", success_missing=True)
    assert symptoms(both) == ["exit 1 and FAILED"]
    assert "no success pattern in the log" in symptoms(
        rows_of(Status.FAILED, exit_code=0, success_missing=True))


def test_diagnose_cancelled_and_preempted() -> None:
    rows = rows_of(Status.CANCELLED, slurm_state="CANCELLED by 0", job_id="42")
    assert rows == [{"symptom": "CANCELLED", "cause": "pre-empted or cancelled",
                     "advice": "sacct -j 42 --format=JobID,State,Reason"}]
    assert symptoms(rows_of(Status.CANCELLED, slurm_state="PREEMPTED")) == [
        "CANCELLED (PREEMPTED)"]


def test_diagnose_empty_log() -> None:
    rows = rows_of(Status.FAILED, log_empty=True)
    assert rows == [{"symptom": "empty output log", "cause": "container did not start",
                     "advice": "check .err / .salloc.log for mount or image errors"}]


def test_diagnose_hang() -> None:
    rows = rows_of(Status.HANG_DETECTED, log_lines=["NCCL WARN timeout", "hang detected"])
    assert symptoms(rows) == ["HANG_DETECTED"]
    assert rows[0]["cause"] == "deadlock, NCCL timeout"
    assert "200" in rows[0]["advice"]


def test_diagnose_unable_to_create_step() -> None:
    lines = ["srun: error: Unable to create step for job 123: Job/step already completing"]
    rows = rows_of(Status.FAILED, exit_code=1, log_lines=lines)
    assert rows[1] == {"symptom": "srun: error: Unable to create step",
                       "cause": "allocation expired",
                       "advice": "drop the state file and re-run (re-allocates)"}


@pytest.mark.parametrize("line", [
    "srun: error: container llama_auto_test does not exist",
    'error: pyxis: error: a container with name "llama" does not exist, '
    "and --container-image is not set",
])
def test_diagnose_container_missing(line: str) -> None:
    rows = rows_of(Status.FAILED, exit_code=1, log_lines=[line])
    assert rows[-1] == {"symptom": "srun: error: ... does not exist",
                        "cause": "named container missing",
                        "advice": "drop the state file and re-run (re-imports)"}


def test_diagnose_node_fail() -> None:
    rows = rows_of(Status.FAILED, slurm_state="NODE_FAIL", exit_code=0)
    assert symptoms(rows) == ["NODE_FAIL"]


def test_diagnose_build_failed_and_error() -> None:
    assert symptoms(rows_of(Status.BUILD_FAILED)) == ["BUILD_FAILED"]
    assert symptoms(rows_of(Status.ERROR)) == ["ERROR"]


def test_diagnose_log_findings() -> None:
    lines = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
             "NCCL error in: ProcessGroupNCCL.cpp:1234, unhandled cuda error"]
    assert symptoms(rows_of(Status.FAILED, log_lines=lines)) == [
        "CUDA out of memory in the log", "NCCL error in the log"]
    host = ["slurmstepd: error: Detected 1 oom_kill event in StepId=5.0."]
    assert symptoms(rows_of(Status.FAILED, log_lines=host)) == ["oom-kill in the log"]
    # the OOM row already says it
    assert symptoms(rows_of(Status.OUT_OF_MEMORY, log_lines=lines[:1])) == ["OUT_OF_MEMORY"]


def test_diagnose_patterns_and_metrics() -> None:
    rows = rows_of(Status.FAILED, failure_hits={"Traceback": 1, "NaN": 0},
                   success_missing=True,
                   metrics={"threshold_not_met": True, "failed": 2, "errors": 0})
    assert symptoms(rows) == ["failure pattern matched: Traceback",
                              "no success pattern in the log", "accuracy below threshold",
                              "pytest: 2 failed, 0 errors"]


# ---------------------------------------------------------------------- errors
def test_errors_from_fixture() -> None:
    got = errors_from(lines_of("pytest_failed.log"))
    assert got == [  # the failing tests first (issue 17 item 18), then the rest in order
        "FAILED tests/unittest/test_llama.py::test_llama_accuracy - AssertionError: assert "
        "'abc' == 'abd'",
        "ERROR tests/unittest/test_llama.py::test_llama_tp2[float16] - RuntimeError: CUDA "
        "error: no kernel image is available for execution on the device",
        "_________________ ERROR at setup of test_llama_tp2[float16] _________________",
        "E       RuntimeError: CUDA error: no kernel image is available for execution on the "
        "device",
        "E       AssertionError: assert 'abc' == 'abd'",
    ]


def test_errors_from_traceback_last_line() -> None:
    lines = [
        "starting",
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in <module>',
        "    main()",
        "KeyboardInterrupt",
        "srun: error: node1: task 0: Exited with exit code 1",
        "srun: error: node1: task 0: Exited with exit code 1",
        "slurmstepd: error: *** STEP 12.0 ON node1 CANCELLED AT 2025-01-01T00:00:00 ***",
        "all good here",
        "[TRT-LLM] [E] ERROR while loading",
        "0 errors, 0 failures",
        "pyxis: error: a container with name x does not exist",
        "watchdog: HANG DETECTED on rank 0",
        "Segmentation fault (core dumped)",
    ]
    assert errors_from(lines) == [
        "KeyboardInterrupt",
        "srun: error: node1: task 0: Exited with exit code 1",
        "slurmstepd: error: *** STEP 12.0 ON node1 CANCELLED AT 2025-01-01T00:00:00 ***",
        "[TRT-LLM] [E] ERROR while loading",
        "pyxis: error: a container with name x does not exist",
        "watchdog: HANG DETECTED on rank 0",
        "Segmentation fault (core dumped)",
    ]


def test_errors_from_chained_traceback() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in f',
        "ValueError: first",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "a.py", line 3, in g',
        "torch.distributed.DistBackendError: NCCL timeout",
    ]
    assert errors_from(lines) == ["ValueError: first",
                                  "torch.distributed.DistBackendError: NCCL timeout"]


def test_errors_from_dedup_and_limit() -> None:
    lines = [f"RuntimeError: boom {i % 30}" for i in range(200)]
    got = errors_from(lines)
    assert len(got) == results.MAX_ERRORS
    assert got[0] == "RuntimeError: boom 0"
    assert len(set(got)) == len(got)
    long_line = "ValueError: " + "x" * 5000
    assert len(errors_from([long_line])[0]) == 500


# --------------------------------------------------------------------- summary
def test_summarize_each_workflow() -> None:
    def summarize(kind: WorkflowType, metrics: dict[str, Any]) -> str:
        return workflow(kind).summarize(metrics)

    assert summarize(WorkflowType.PYTEST, {"passed": 3, "failed": 1, "seconds": 12.34}) == (
        "3 passed, 1 failed in 12.34s")
    assert summarize(WorkflowType.PYTEST, {}) == "no pytest summary line found"
    assert summarize(WorkflowType.EVAL, {"accuracy": [71.2], "accuracy_by_task": {"gsm8k": 71.2},
                                         "scores": {"gsm8k accuracy": 71.2},
                                         "threshold_not_met": True}) == (
        "gsm8k accuracy 71.2; accuracy threshold not met")
    assert summarize(WorkflowType.EVAL, {"scores": {f"t{i} acc": i for i in range(6)}}) == (
        "t0 acc 0, t1 acc 1, t2 acc 2, t3 acc 3 (+2 more)")
    # metrics of an earlier report (no scores): its accuracy list
    assert summarize(WorkflowType.EVAL, {"accuracy": [0.5, 0.6]}) == "accuracy 0.5, 0.6"
    assert summarize(WorkflowType.EVAL, {"accuracy": []}) == "no eval figures found"
    assert summarize(WorkflowType.BENCHMARK, {"throughput": {"req/s": 8.1}, "latency": {},
                                              "done_marker": "8_done_x.txt"}) == (
        "req/s 8.1; done marker 8_done_x.txt")
    assert summarize(WorkflowType.BENCHMARK, {"throughput": {}, "latency": {},
                                              "done_marker": None}) == (
        "no throughput or latency figures found; no done marker")
    assert summarize(WorkflowType.CUSTOM, {"last_lines": ["done", "  ", ""]}) == "done"
    assert summarize(WorkflowType.CUSTOM, {"last_lines": []}) == "no output"


def test_result_warnings() -> None:
    assert workflow(WorkflowType.PYTEST).warnings({}) == ["no pytest summary line in the log tail"]
    assert workflow(WorkflowType.PYTEST).warnings({"passed": 1, "seconds": 1.0}) == []
    assert workflow(WorkflowType.EVAL).warnings({}) == [
        "no eval figures (accuracy lines, results tables, scores) in the log"]
    assert workflow(WorkflowType.EVAL).warnings({"scores": {"mmlu acc": 0.5}}) == []
    assert len(workflow(WorkflowType.BENCHMARK).warnings({"throughput": {}, "latency": {},
                                                         "done_marker": None})) == 2
    assert workflow(WorkflowType.CUSTOM).warnings({}) == []


def test_errors_from_finds_compiler_and_build_tool_errors() -> None:
    from slurm_fsm.results import errors_from

    lines = [
        "[ 50%] Building CXX object cpp/a.o",
        "/src/a.cpp:12:5: error: 'foo' was not declared in this scope",
        "kernels/b.cu(88): error: identifier \"bar\" is undefined",
        "CMake Error at CMakeLists.txt:10 (message):",
        "make[2]: *** [cpp/a.o] Error 1",
        "ninja: build stopped: subcommand failed.",
        "[ 60%] Building CXX object cpp/c.o",
    ]
    found = errors_from(lines)
    assert found == lines[1:6]


def test_diagnosis_tells_expired_allocation_from_too_many_tasks() -> None:
    from slurm_fsm.results import Status, diagnose

    def symptoms(line: str) -> list[str]:
        rows = diagnose(Status.FAILED, exit_code=1, slurm_state=None, log_empty=False,
                        log_lines=[line])
        return [r["cause"] for r in rows]

    expired = symptoms("srun: error: Unable to create step for job 8: Job/step already "
                       "completing or completed")
    assert "allocation expired" in expired
    assert "allocation expired" in symptoms("srun: error: Slurm job 8 has expired")
    too_many = symptoms("srun: error: Unable to create step for job 8: More processors "
                        "requested than permitted")
    assert "allocation expired" not in too_many
    assert any("more tasks" in c for c in too_many)


def test_a_submitted_job_s_step_is_not_blamed_on_the_allocation() -> None:
    """Issue 44.5: ``More processors requested than permitted`` for a job the script
    submitted itself (``salloc``/``sbatch``: another job id than the allocation's) is
    about that job, not the persistent allocation's size."""
    line = ("srun: error: Unable to create step for job 14: More processors requested "
            "than permitted")
    own = diagnose(Status.FAILED, exit_code=1, slurm_state=None, log_empty=False,
                   log_lines=[line.replace("14", "13")], allocation_id="13")
    assert [r["cause"] for r in own if "More processors" in r["symptom"]] == [
        "the job asks for more tasks than the allocation holds"]
    other = diagnose(Status.FAILED, exit_code=1, slurm_state=None, log_empty=False,
                     log_lines=[line], allocation_id="13")
    (row,) = [r for r in other if "More processors" in r["symptom"]]
    assert "job 14 (not the allocation 13)" in row["symptom"]
    assert row["cause"].startswith("a job the script submitted itself")
    assert "salloc" in row["advice"] and "SRUN_CPUS_PER_TASK" in row["advice"]
    assert "ntasks_per_node" not in row["advice"]


def test_diagnose_a_launch_refused_for_an_expired_credential_names_the_node() -> None:
    """Real (fractal-server#2835): the node refused the step's launch because its
    credential had expired; the row names the node and what to check there."""
    line = ("srun: error: Task launch for StepId=23547462.4 failed on node "
            "u20-chiivm0-607: Job credential expired")
    rows = diagnose(Status.FAILED, exit_code=1, slurm_state="FAILED", log_empty=False,
                    log_lines=[line])
    row = next(r for r in rows if "credential" in r["symptom"])
    assert "u20-chiivm0-607" in row["symptom"]
    assert "clock" in row["cause"] and "u20-chiivm0-607" in row["advice"]
