"""Issue 25's parser and verdict-rule items (3, 4, 5, 7): the single behaviours, over the
real texts of tests/data/real/ (test_golden_corpus.py pins every parser over all of them).

* 3: the hang marker is the hang detector's own line (docs/report.md, "The hang marker");
* 4: lm-eval tables, GenAI-Perf tables, task names with spaces, scores, timestamps,
  pytest-pretty, pytest-timeout's thread method;
* 5: several ranks (``srun -l``), one summary; labelled and ``SUBFAILED[msg]`` lines named;
* 7: diagnosis rows and error lines of TensorRT-LLM's C++ and NCCL failures, Slurm's
  ``slurmstepd-<node>: error:`` lines, a job held in SPECIAL_EXIT.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_fsm.executor import Executor
from slurm_fsm.joboutput import HangJudge, JobOutput, output_for_spec
from slurm_fsm.logs import is_hang_line, strip_log_prefix
from slurm_fsm.results import (
    Status,
    decide,
    diagnose,
    errors_from,
    parse_benchmark,
    parse_eval,
    parse_pytest,
)
from slurm_fsm.spec import WorkflowType
from slurm_fsm.testing import FakeCluster, FakeScript
from slurm_fsm.workflows import workflow

from conftest import SpecFactory

REAL = Path(__file__).resolve().parent / "data" / "real"
PYTEST_OUT = REAL / "local" / "pytest"
DETECTOR = "[12/03/2026-17:00:00] [TRT-LLM] [E] Hang detected after 300 seconds."


def real(name: str) -> list[str]:
    return (REAL / name).read_text(encoding="utf-8").splitlines()


# ------------------------------------------------------------------- item 3: hang marker
@pytest.mark.parametrize("line", [
    DETECTOR,
    "[09/17/2025-21:24:19] [TRT-LLM] [RANK 2] [E] Hang detected after 300 seconds.",
    "[12/03/2026-17:00:00] [TRT-LLM] [MPI_Rank 1] [E] Hang detected after 300 seconds.",
    "1: " + DETECTOR,  # srun -l
    " 12: " + DETECTOR,
    "\x1b[31m" + DETECTOR + "\x1b[0m",
    "[TRT-LLM] [E] Hang detected after 3 seconds.",
    "2026-12-03 17:00:00,123 - ERROR - Hang detected after 3 seconds.",
    "2026-12-03T17:00:00.123Z ERROR Hang detected after 3 seconds.",
    "NCCL watchdog: Hang detected on rank 3",  # a source naming itself, then the words
    "hang detected",
])
def test_the_detectors_line_is_a_hang_line(line: str) -> None:
    assert is_hang_line(line)


@pytest.mark.parametrize("line", [
    # pytest's captured log (-rA) and live log: level, logger:file:line, then the message
    "ERROR    TRT-LLM:test_hangunit.py:23 [TRT-LLM] [E] Hang detected after 1 seconds.",
    # pytest -v / default progress text before a test's raw output (-s)
    "test_hangunit.py::test_detector_fires_after_timeout " + DETECTOR,
    "test_hangunit.py " + DETECTOR,
    "." + DETECTOR,
    # a test's own source and assertion in a failure report
    '>       assert "Hang detected after 2 seconds." in messages',
    "E       AssertionError: Hang detected after 2 seconds.",
    'echo "Hang detected"',
    "grep -c 'Hang detected' run.log",
    "no hang detected so far",
])
def test_a_line_that_mentions_the_words_is_not(line: str) -> None:
    assert not is_hang_line(line)


def test_strip_log_prefix_keeps_the_message() -> None:
    assert strip_log_prefix("0: " + DETECTOR) == "Hang detected after 300 seconds."
    assert strip_log_prefix("2024/07/11 23:37:56 Request throughput (req/sec): 3.014") == \
        "Request throughput (req/sec): 3.014"
    assert strip_log_prefix("[Latency] AVERAGE: 1.0") == "AVERAGE: 1.0"


def follow(path: Path, lines: list[str]) -> tuple[JobOutput, list[bool]]:
    """Write ``lines`` to ``path`` one at a time, the output following after each (as the
    monitor polls); what ``hang_detected`` said after each line, then after finish()."""
    out = JobOutput([path])
    seen: list[bool] = []
    with path.open("w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
            f.flush()
            out.advance()
            seen.append(out.hang_detected)
    out.finish()
    seen.append(out.hang_detected)
    return out, seen


@pytest.mark.parametrize("name", ["hangunit_rA.txt", "hangunit_s.txt", "hangunit_sv.txt",
                                  "hangunit_l_s.txt"])
def test_a_passing_hang_detector_unit_test_is_never_a_hang(tmp_path: Path, name: str) -> None:
    """The recorded Slurm outputs of a passing TensorRT-LLM-shaped detector unit test: the
    monitor never sees a hang while following (so never cancels), nor at the end."""
    out, seen = follow(tmp_path / "job.log", real(f"local/pytest/{name}"))
    assert not any(seen), name
    assert out.hang_line == ""


def test_pytest_q_s_is_judged_at_the_end(tmp_path: Path) -> None:
    """``-q`` prints no session header: the detector's raw line is a hang while following
    (nothing says a pytest run is going on) and is dropped by the summary after it.
    docs/report.md says so."""
    _, seen = follow(tmp_path / "job.log", real("local/pytest/hangunit_qs.txt"))
    assert seen[0] is True and seen[-1] is False


def test_the_real_detectors_line_is_seen_at_once_while_following(tmp_path: Path) -> None:
    lines = ["[TRT-LLM] [I] executor loop started", "0: " + DETECTOR,
             "0: [12/03/2026-17:00:00] [TRT-LLM] [E] HangDetector: self-SIGKILL; relying on "
             "the launcher to propagate to peer ranks."]
    out, seen = follow(tmp_path / "job.log", lines)
    assert seen == [False, True, True, True]
    assert out.hang_line == "0: " + DETECTOR


def test_a_detector_line_inside_a_pytest_run_that_dies_stands_at_the_end(
        tmp_path: Path) -> None:
    """Pending while the session runs (the monitor waits); the session never printed its
    summary (the detector killed it): a hang once the job has ended."""
    lines = ["============================= test session starts ==============================",
             "collected 1 item", "", "tests/integration/defs/test_e2e.py ", DETECTOR]
    out, seen = follow(tmp_path / "job.log", lines)
    assert seen == [False] * 5 + [True]
    assert out.hang_line == DETECTOR
    assert out.hang_judge.closed and not out.hang_judge.pending


def test_only_the_rank_whose_session_ended_drops_its_line() -> None:
    judge = HangJudge()
    for line in ["0: === test session starts ===", "1: === test session starts ===",
                 "0: " + DETECTOR, "1: " + DETECTOR, "0: ==== 4 passed in 1.00s ===="]:
        judge.feed(line)
    assert judge.hang_line == "" and judge.pending
    judge.close()
    assert judge.hang_line == "1: " + DETECTOR


def test_captured_sections_never_count_even_without_a_header() -> None:
    """``-q -rA``: no session header, the PASSES section reprints the line."""
    judge = HangJudge()
    for line in ["....  [100%]", "==== PASSES ====", "____ test_detector_fires ____",
                 "---------- Captured stderr call ----------", DETECTOR,
                 "---------- Captured log call ----------",
                 "ERROR    TRT-LLM:test_h.py:23 [TRT-LLM] [E] Hang detected after 1 seconds."]:
        judge.feed(line)
        assert judge.hang_line == ""
    judge.close()
    assert judge.hang_line == ""
    judge = HangJudge()  # after the section ends, a line stands again
    for line in ["---- Captured stderr call ----", DETECTOR, "==== short test summary info ===",
                 "echo", DETECTOR]:
        judge.feed(line)
    assert judge.hang_line == DETECTOR


def test_out_and_err_read_together_give_the_err_line_to_the_outs_session(
        tmp_path: Path) -> None:
    """One-shot with ``--error``: pytest's progress in the .out, the logger's line in the
    .err, a short job read in one go at the end: the .out's summary is read first, yet
    the line belongs to the session it ended (no order is known between two files)."""
    lines = [x for x in real("local/pytest/hangunit_s.txt") if "Hang detected" not in x]
    out_path, err_path = tmp_path / "job.out", tmp_path / "job.err"
    out_path.write_text("\n".join(lines) + "\n")
    err_path.write_text(DETECTOR + "\n")
    out = JobOutput([out_path, err_path])
    out.finish()
    assert not out.hang_detected
    # a session that never ended (the detector killed pytest): the .err line stands
    out_path.write_text("\n".join(lines[:5]) + "\n")
    died = JobOutput([out_path, err_path])
    died.finish()
    assert died.hang_line == DETECTOR
    # the .err line read in a later read than the .out's summary: a new hang
    out_path.write_text("\n".join(lines) + "\n")
    err_path.write_text("")
    later = JobOutput([out_path, err_path])
    later.advance()
    err_path.write_text(DETECTOR + "\n")
    later.finish()
    assert later.hang_line == DETECTOR


def test_a_section_that_opens_and_ends_in_one_read(tmp_path: Path) -> None:
    """JobOutput feeds the judge only the lines that may matter; the end of a captured
    section read in the same chunk as its start is among them."""
    log = tmp_path / "job.log"
    log.write_text("\n".join(["---- Captured stderr call ----", DETECTOR,
                              "==== short test summary info ====", "later:", DETECTOR]) + "\n")
    out = JobOutput([log])
    out.advance()
    assert out.hang_line == DETECTOR and len(out.hang_judge._lines) == 1


def test_an_unfinished_detector_line_is_judged_once(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("start\n" + DETECTOR[:30])
    out = JobOutput([log])
    out.advance()
    assert not out.hang_detected  # the marker has not come yet
    with log.open("a") as f:
        f.write(DETECTOR[30:])
    out.advance()
    assert out.hang_line == DETECTOR  # no newline yet: judged now
    with log.open("a") as f:
        f.write("\nnext\n")
    out.finish()
    assert out.hang_line == DETECTOR and len(out.hang_judge._lines) == 1


def test_a_healthy_pytest_job_with_a_detector_unit_test_passes_on_the_fake(
        make_spec: SpecFactory) -> None:
    """Followed line by line by the real monitor: no cancel, PASSED."""
    fake = FakeCluster()
    spec = make_spec(workflow_type="pytest")
    fake.script(spec.script_path, FakeScript(lines=tuple(real("local/pytest/hangunit_s.txt"))))
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.PASSED, report.render_text()
    assert not [c for c in fake.calls if c.op == "cancel"]
    assert report.metrics["passed"] == 4


def test_output_for_spec_judges_the_hang(tmp_path: Path, make_spec: SpecFactory) -> None:
    log = tmp_path / "x.log"
    log.write_text("\n".join(real("local/pytest/hangunit_rA.txt")) + "\n")
    out = output_for_spec(make_spec(workflow_type="pytest"), [log])
    out.finish()
    assert not out.hang_detected


# ------------------------------------------------------------- item 4: result formats
def test_lm_eval_table_figures() -> None:
    m = parse_eval(real("eval/lm_eval_gsm8k_deepseek_r1_fp8.txt"))
    assert m["scores"] == {"gsm8k exact_match,flexible-extract": 0.9538,
                           "gsm8k exact_match,strict-match": 0.95}
    text = workflow(WorkflowType.EVAL).summarize(m)
    assert "gsm8k exact_match,flexible-extract 0.9538" in text
    assert workflow(WorkflowType.EVAL).warnings(m) == []


def test_lm_eval_table_with_groups_and_none_filter() -> None:
    lines = ["|  Tasks  |Version|Filter|n-shot|Metric|   |Value |   |Stderr|",
             "|---------|------:|------|-----:|------|---|-----:|---|-----:|",
             "|mmlu     |      2|none  |      |acc   |↑  |0.6840|±  |0.0037|",
             "| - humanities|  2|none  |      |acc   |↑  |0.6200|±  |0.0068|",
             "|hellaswag|      1|none  |     0|acc_norm|↑|0.8120|±  |0.0039|",
             "|wikitext |      2|none  |     0|word_perplexity|↓|9.1234|±|   N/A|",
             "done"]
    assert parse_eval(lines)["scores"] == {"mmlu acc": 0.684, "humanities acc": 0.62,
                                           "hellaswag acc_norm": 0.812,
                                           "wikitext word_perplexity": 9.1234}


def test_task_names_with_spaces_scores_and_timestamps() -> None:
    blocks = real("eval/trtllm_eval_new_tasks_built.txt")
    m = parse_eval(blocks)
    assert m["accuracy_by_task"]["JSON Mode Eval"] == 87.2
    assert m["accuracy_by_task"]["JSON Mode Eval grammar"] == 98.0
    assert "Mode" not in m["accuracy_by_task"]
    assert m["accuracy_by_task"]["GPQA"] == 45.96
    assert m["scores"]["rouge1"] == 30.4512 and m["scores"]["Per-token perplexity"] == 5.8125
    stamped = parse_eval(["[12/03/2026-17:00:00] [TRT-LLM] [I] MMLU weighted average "
                          "accuracy: 68.6", "2026-12-03 17:00:00 INFO gsm8k accuracy: 71.2"])
    assert stamped["accuracy_by_task"] == {"MMLU": 68.6, "gsm8k": 71.2}


def test_eval_relevant_keeps_tables_and_scores_far_from_the_end() -> None:
    wf = workflow(WorkflowType.EVAL)
    assert wf.relevant("|gsm8k|      3|flexible-extract|     5|exact_match|↑  |0.9538|±  |0.0058|")
    assert wf.relevant("[TRT-LLM] [I]   rouge1: 12.345")
    assert wf.relevant("Per-token perplexity: 5.8125")
    assert not wf.relevant("loading weights 3/10")


def test_genai_perf_table_and_go_timestamps(tmp_path: Path) -> None:
    g = parse_benchmark(real("bench/genai_perf_trtllm_gpt2_readme.txt"), tmp_path)
    assert g["throughput"] == {"Output token throughput (per sec) avg": 520.87,
                               "Request throughput (per sec) avg": 1.99}
    assert g["latency"]["Time to first token (ms) avg"] == 16.26
    assert "Output sequence length avg" not in g["latency"]
    t = parse_benchmark(real("bench/triton_trtllm_issue1938_two_runs.txt"), tmp_path)
    assert t["throughput"]["Request throughput (req/sec)"] == 3.088  # the last run's
    assert not any(k[:1].isdigit() for k in [*t["throughput"], *t["latency"]])
    wf = workflow(WorkflowType.BENCHMARK)
    table = real("bench/genai_perf_trtllm_gpt2_readme.txt")
    assert [line for line in table if wf.relevant(line)] == [table[2], table[4], table[5],
                                                             table[6], table[9], table[10]]


def test_pytest_pretty_summary_and_its_failing_test() -> None:
    lines = real("local/pytest/pytest_pretty_1.3.0_failure.txt")
    assert parse_pytest(lines) == {"failed": 1, "passed": 1, "skipped": 1, "seconds": 0.24}
    assert errors_from(lines)[0] == "test_pretty.py:7 test_two - assert (2 + 2) == 5…"


def test_pytest_timeout_thread_method_names_the_test() -> None:
    lines = real("local/pytest/pytest_timeout_2.4.0_thread.txt")
    m = parse_pytest(lines)
    assert m == {"timed_out_test": "/tmp/v2play/test_timeout_thread.py::test_stuck_in_collective"}
    wf = workflow(WorkflowType.PYTEST)
    assert wf.verdict(m) == f"pytest-timeout stopped {m['timed_out_test']}"
    assert "test_stuck_in_collective" in wf.summarize(m)
    assert wf.diagnosis(m)[0]["symptom"].endswith("test_stuck_in_collective timed out")
    assert errors_from(lines)[0].endswith("in test_stuck_in_collective")
    decision = decide(exit_code=0, slurm_state="COMPLETED", hang=False, timed_out=False,
                      success_hits={}, failure_hits={}, success_patterns=[],
                      workflow_type=WorkflowType.PYTEST, metrics=m)
    assert decision.status is Status.FAILED


def test_the_timed_out_test_is_named_when_many_stacks_follow(tmp_path: Path) -> None:
    """TensorRT-LLM runs many threads: pytest-timeout dumps each one's stack after the
    main thread's; the test's frame is kept however far from the end it is."""
    lines = real("local/pytest/pytest_timeout_2.4.0_thread.txt")
    banner = lines.index(next(x for x in lines if x.startswith("+++")))
    others = [f"~~~~~ Stack of Thread-{i} (1400{i}) ~~~~~\n  File \"/lib/threading.py\", "
              f"line 331, in wait\n    waiter.acquire()" for i in range(80)]
    log = tmp_path / "job.log"
    log.write_text("\n".join(lines[:banner] + others + lines[banner:]) + "\n")
    wf = workflow(WorkflowType.PYTEST)
    out = JobOutput([log], relevant=wf.relevant, hint=wf.relevant_hint)
    out.finish()
    assert wf.parse(out.parser_lines(100), tmp_path) == {
        "timed_out_test": "/tmp/v2play/test_timeout_thread.py::test_stuck_in_collective"}


# ------------------------------------------------------------ item 5: several ranks
@pytest.mark.parametrize("order", ["failing rank last", "failing rank first"])
def test_every_ranks_summary_counts(order: str) -> None:
    rank0 = ["0: ============ 4 passed in 1.00s ============"]
    rank1 = ["1: ===== 1 failed, 3 passed in 1.20s ====="]
    lines = rank0 + rank1 if order == "failing rank last" else rank1 + rank0
    m = parse_pytest(lines)
    assert m == {"passed": 7, "failed": 1, "seconds": 1.2, "ranks": 2}
    decision = decide(exit_code=0, slurm_state="COMPLETED", hang=False, timed_out=False,
                      success_hits={}, failure_hits={}, success_patterns=[],
                      workflow_type=WorkflowType.PYTEST, metrics=m)
    assert decision.status is Status.FAILED
    assert "2 ranks" in workflow(WorkflowType.PYTEST).summarize(m)


def test_each_rank_counts_its_last_summary_only() -> None:
    m = parse_pytest(["0: 1 failed in 1.00s", "0: 2 passed in 1.00s", "1: 2 passed in 2.00s"])
    assert m == {"passed": 4, "seconds": 2.0, "ranks": 2}


def test_the_recorded_two_rank_run_fails() -> None:
    m = parse_pytest(real("local/pytest/srun_l_two_ranks_rank1_fails.txt"))
    assert m["failed"] == 1 and m["ranks"] == 2


def test_labelled_failures_are_named_before_traceback_lines() -> None:
    lines: list[str] = []
    for i in range(41):
        lines += [f"{i % 2}: Traceback (most recent call last):", f'{i % 2}:   File "t.py"',
                  f"{i % 2}: ValueError: bad value {i}"]
    lines += [f"{i % 2}: FAILED tests/test_a.py::test_{i} - ValueError" for i in range(41)]
    errors = errors_from(lines)
    assert len(errors) == 20 and all("FAILED tests/test_a.py::test_" in e for e in errors)


def test_subfailed_with_a_message_is_named() -> None:
    errors = errors_from(real("local/pytest/srun_l_two_ranks_subfailed_msg.txt"))
    assert errors[0] == ("0: SUBFAILED[second case of the batch] test_sub_msg.py::test_sub_msg"
                         " - Assertion...")
    assert sum("SUBFAILED" in e for e in errors) == 1  # the same line of rank 1: once


# --------------------------------------------------------------- item 7: diagnosis
def _symptoms(lines: list[str], status: Status = Status.FAILED,
              state: str = "FAILED") -> list[str]:
    return [r["symptom"] for r in diagnose(status, exit_code=1, slurm_state=state,
                                           log_empty=False, log_lines=lines)]


@pytest.mark.parametrize("name", ["failures/trtllm_issue1060_cpp_cuda_oom.txt",
                                  "failures/triton_backend_issue281_cuda_oom.txt",
                                  "failures/trtllm_issue7818_rank_cuda_oom.txt"])
def test_tensorrt_llm_cuda_oom_is_a_gpu_oom(name: str) -> None:
    symptoms = _symptoms(real(name))
    assert "CUDA out of memory in the log" in symptoms
    assert "oom-kill in the log" not in symptoms


@pytest.mark.parametrize("name", ["failures/slurm_oom_kill_step.txt",
                                  "failures/slurm_oom_kill_step_8538204.txt"])
def test_slurms_oom_kill_is_a_host_oom(name: str) -> None:
    symptoms = _symptoms(real(name))
    assert "oom-kill in the log" in symptoms
    assert "CUDA out of memory in the log" not in symptoms


def test_slurmstepd_node_lines_and_nccl_lines_are_errors() -> None:
    errors = errors_from(real("local/slurm/step_cancelled_from_outside.txt"))
    assert errors[0].startswith("slurmstepd-n1: error: *** STEP 12.0 ON n1 CANCELLED AT")
    time_limit = "slurmstepd-n2: error: *** JOB 11 ON n2 CANCELLED AT 2026-12-03T18:08:10 " \
                 "DUE TO TIME LIMIT ***"
    assert errors_from(["x", time_limit]) == [time_limit]
    nccl = real("failures/trtllm_issue213_nccl_mpirun.txt")
    assert errors_from(nccl)[0].startswith("Failed, NCCL error /src/tensorrt_llm/")
    assert "NCCL error in the log" in _symptoms(nccl)
    assert errors_from(real("failures/openmpi_mpi_abort.txt")) == [
        "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD"]


@pytest.mark.parametrize("held", ["SPECIAL_EXIT", "REQUEUE_HOLD"])
def test_a_held_job_says_it_was_held_not_raise_the_timeout(held: str) -> None:
    rows = diagnose(Status.TIMEOUT, exit_code=None, slurm_state=held, log_empty=False,
                    log_lines=[], job_id="42")
    assert rows[0]["symptom"] == f"job held in {held}"
    assert "scontrol release 42" in rows[0]["advice"]
    assert not any("raise" in r["advice"] and "timeout" in r["advice"] for r in rows)
    timeout_rows = diagnose(Status.TIMEOUT, exit_code=None, slurm_state="RUNNING",
                            log_empty=False, log_lines=[])
    assert any("raise monitor_timeout_seconds" in r["advice"] for r in timeout_rows)


def test_a_requeued_job_says_so() -> None:
    """Recorded on the local cluster (the real test
    test_a_job_held_in_special_exit_says_it_was_held): after ``scontrol requeuehold
    State=SpecialExit`` the job's log says why its step ended; the executor then cancels
    the held job when the monitor gives up, so the final state is CANCELLED."""
    line = ("slurmstepd-n1: error: *** JOB 27 ON n1 CANCELLED AT 2026-12-03T18:19:33 "
            "DUE TO JOB REQUEUE ***")
    rows = diagnose(Status.TIMEOUT, exit_code=0, slurm_state="CANCELLED", log_empty=False,
                    log_lines=["started", line], job_id="27")
    assert rows[0]["symptom"] == "job requeued by Slurm (... DUE TO JOB REQUEUE)"
    assert "squeue -j 27" in rows[0]["advice"] and "scontrol release 27" in rows[0]["advice"]
    assert not any("raise monitor_timeout" in r["advice"] for r in rows)
    assert errors_from(["started", line]) == [line]


def test_the_time_limit_line_is_an_error() -> None:
    lines = real("local/slurm/time_limit.txt")
    assert any("DUE TO TIME LIMIT" in e for e in errors_from(lines))
