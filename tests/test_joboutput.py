"""slurm_fsm.joboutput: one view of all of a job's files, read to the end before judging."""

from __future__ import annotations

from pathlib import Path

from slurm_fsm.joboutput import RELEVANT_LINES, JobOutput
from slurm_fsm.results import parse_benchmark
from slurm_fsm.spec import WorkflowType
from slurm_fsm.workflows import workflow


def _bench_output(paths: list[Path]) -> JobOutput:
    return JobOutput(paths, relevant=workflow(WorkflowType.BENCHMARK).relevant)


def test_a_bench_report_far_from_the_end_is_read(tmp_path: Path) -> None:
    """Item 4: Request Throughput 150 lines before the end (teardown logging after it)."""
    log = tmp_path / "bench.log"
    lines = ["[TRT-LLM] [I] starting"] * 10
    lines += ["Request Throughput (req/sec):                     12.3456",
              "Total Output Throughput (tokens/sec):             4321.0"]
    lines += [f"[TRT-LLM] [I] teardown {i}" for i in range(150)]
    log.write_text("\n".join(lines) + "\n")
    out = _bench_output([log])
    out.finish()
    metrics = parse_benchmark(out.parser_lines(100), tmp_path)
    assert metrics["throughput"] == {"Request Throughput (req/sec)": 12.3456,
                                     "Total Output Throughput (tokens/sec)": 4321.0}
    assert len(out.parser_lines(100)) == 102


def test_relevant_lines_are_bounded(tmp_path: Path) -> None:
    log = tmp_path / "many.log"
    log.write_text("".join(f"Request Throughput (req/sec): {i}\n"
                           for i in range(RELEVANT_LINES + 500)))
    out = _bench_output([log])
    out.finish()
    assert len(out.parser_lines(0)) == RELEVANT_LINES
    assert out.parser_lines(0)[-1].endswith(str(RELEVANT_LINES + 499))


def test_out_and_err_are_one_view(tmp_path: Path) -> None:
    """Item 2: what the job writes to .err is followed like its .out."""
    out_path, err_path = tmp_path / "job_1.out", tmp_path / "job_1.err"
    out_path.write_text("starting\n")
    err_path.write_text("[TRT-LLM] [E] Hang detected after 3 seconds.")  # no final newline
    out = JobOutput([out_path, err_path], patterns=["Hang detected"])
    out.advance()
    assert out.hang_detected
    out.finish()  # the unfinished last line is counted too
    assert out.hang_line == "[TRT-LLM] [E] Hang detected after 3 seconds."
    assert out.pattern_hits == {"Hang detected": 1}
    assert out.file_tail(err_path) == ["[TRT-LLM] [E] Hang detected after 3 seconds."]
    assert out.tail() == ["starting", "[TRT-LLM] [E] Hang detected after 3 seconds."]


def test_an_endless_line_is_cut_not_held(tmp_path: Path) -> None:
    log = tmp_path / "noline.log"
    log.write_bytes(b"x" * (1 << 20))
    out = JobOutput([log])
    out.finish()
    # cut, and the cut says how long the line really was (issue 41 item 8: docs/report.md)
    assert out.lines_seen == 1
    assert out.tail() == ["x" * 8192 + f" [... {(1 << 20) - 8192} more characters]"]


def test_a_long_line_that_ends_says_its_whole_length(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    log.write_bytes(b"y" * 300_000 + b"\nend\n")
    out = JobOutput([log])
    out.finish()
    assert out.tail() == ["y" * 8192 + f" [... {300_000 - 8192} more characters]", "end"]


def test_a_link_planted_at_the_err_is_not_read(tmp_path: Path) -> None:
    """Issue 20 item 10: the one-shot .err is opened without following a link."""
    secret = tmp_path / "other.txt"
    secret.write_text("accuracy: 99.9\n")
    (tmp_path / "job_1.err").symlink_to(secret)
    out_path = tmp_path / "job_1.out"
    out_path.write_text("done\n")
    out = JobOutput([out_path, tmp_path / "job_1.err"],
                    relevant=workflow(WorkflowType.EVAL).relevant)
    out.finish()
    assert out.tail() == ["done"]
    assert any("symbolic link" in p for p in out.problems)


def test_the_hint_finds_every_line_relevant_would_keep(tmp_path: Path) -> None:
    """Each workflow's relevant_hint is a superset: with it, the same lines are kept as
    when relevant() is asked of every line (over every real output of the corpus)."""
    real = Path(__file__).resolve().parent / "data" / "real"
    texts = [p for p in real.rglob("*.txt") if not p.name.endswith(".expected.json")]
    assert texts
    for wf_type in (WorkflowType.PYTEST, WorkflowType.EVAL, WorkflowType.BENCHMARK):
        wf = workflow(wf_type)
        assert wf.relevant_hint is not None
        for path in texts:
            full = JobOutput([path], relevant=wf.relevant)
            hinted = JobOutput([path], relevant=wf.relevant, hint=wf.relevant_hint)
            full.finish()
            hinted.finish()
            assert hinted.parser_lines(0) == full.parser_lines(0), (wf_type, path.name)
