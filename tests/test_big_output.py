"""Issue 41 item 5: a job that writes faster than its output can be read. A 2 GB log got
the right verdict, but its final read cost about 30 s of CPU after the job ended. The
report must follow the job's end within a second or two whatever the log's size: the
reads are bounded in bytes (:data:`~slurm_fsm.joboutput.FOLLOW_READ_BYTES` per look
while the job runs, :data:`~slurm_fsm.joboutput.FINAL_READ_BYTES` of lines once it has
ended), and what was skipped is said. The limits are made small here so that a few
megabytes stand for gigabytes; ``benchmarks/bigoutput.py`` measures the real sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_fsm import joboutput
from slurm_fsm.executor import Executor
from slurm_fsm.joboutput import JobOutput, output_for_spec
from slurm_fsm.results import Status
from slurm_fsm.spec import WorkflowType
from slurm_fsm.testing import FakeCluster, FakeScript
from slurm_fsm.workflows import workflow

from conftest import SpecFactory

KIB = 1024
FINAL = 64 * KIB
FOLLOW = 32 * KIB
FILLER = "step {i}: loss=0.1234 lr=1.0e-04 grad_norm=0.98 elapsed 12.3s\n"


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(joboutput, "FINAL_READ_BYTES", FINAL)
    monkeypatch.setattr(joboutput, "FOLLOW_READ_BYTES", FOLLOW)


def _big_log(path: Path, middle: str, end: list[str], size: int = 2 << 20) -> None:
    with open(path, "w") as f:
        f.write("collected 3 items\n")
        written = i = 0
        while written < size:
            text = "".join(FILLER.format(i=j) for j in range(i, i + 1000))
            if middle and written < size // 2 <= written + len(text):
                text += middle + "\n"
            f.write(text)
            written += len(text)
            i += 1000
        f.write("\n".join(end) + "\n")


def _pytest_output(paths: list[Path]) -> JobOutput:
    wf = workflow(WorkflowType.PYTEST)
    return JobOutput(paths, relevant=wf.relevant, hint=wf.relevant_hint,
                     patterns={"Traceback": None, "NEVER": None})


@pytest.mark.usefixtures("small_limits")
def test_the_read_after_the_end_is_bounded_and_says_what_it_skipped(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    _big_log(log, "Traceback (most recent call last):",
             ["FAILED tests/test_a.py::test_x - AssertionError", "1 failed, 2 passed in 9.50s"])
    size = log.stat().st_size
    out = _pytest_output([log])
    out.finish()
    assert out.bytes_read <= FINAL + 2 * 64 * KIB  # the head, the end from a line start
    assert out.bytes_skipped == size - out.bytes_read
    assert out.head[0] == "collected 3 items"  # nothing was read before: head of the end
    assert out.tail()[-1] == "1 failed, 2 passed in 9.50s"
    lines = out.parser_lines()
    m = workflow(WorkflowType.PYTEST).parse(lines, tmp_path)
    assert m["failed"] == 1 and m["passed"] == 2
    # the skipped middle is searched for the success/failure patterns
    assert out.pattern_hits == {"Traceback": 1, "NEVER": 0}
    assert len(out.gaps) == 1
    assert str(log) in out.gaps[0] and "skipped" in out.gaps[0]
    assert f"{out.bytes_skipped} bytes" in out.gaps[0]


def test_a_head_read_while_following_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    monkeypatch.setattr(joboutput, "FINAL_READ_BYTES", FINAL)
    log = tmp_path / "job.log"
    log.write_text("first line\nsecond\n")
    out = _pytest_output([log])
    out.advance()
    with open(log, "a") as f:
        f.write("".join(FILLER.format(i=i) for i in range(40000)))
        f.write("3 passed in 1.00s\n")
    out.finish()
    assert out.head[:2] == ["first line", "second"]
    assert out.tail()[-1] == "3 passed in 1.00s"
    assert out.bytes_skipped > 0


@pytest.mark.usefixtures("small_limits")
def test_a_look_while_the_job_runs_reads_a_bounded_amount(tmp_path: Path) -> None:
    log, err = tmp_path / "job.out", tmp_path / "job.err"
    _big_log(log, "", ["done"], size=1 << 20)
    err.write_text("".join(FILLER.format(i=i) for i in range(20000)))
    out = _pytest_output([log, err])
    first = out.advance()
    assert 0 < first <= FOLLOW
    assert out._followers[err].bytes_read > 0  # each file gets its share
    out.advance()
    assert out.bytes_read <= 2 * FOLLOW
    assert out.bytes_skipped == 0  # following never skips; only the end does


@pytest.mark.usefixtures("small_limits")
def test_a_small_log_is_read_whole(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    _big_log(log, "Traceback (most recent call last):", ["1 passed in 0.10s"],
             size=FINAL // 2)
    out = _pytest_output([log])
    out.finish()
    assert out.bytes_skipped == 0 and out.gaps == []
    assert out.bytes_read == log.stat().st_size


@pytest.mark.usefixtures("small_limits")
@pytest.mark.parametrize("mode", ["persistent", "one-shot"])
def test_the_report_says_the_middle_was_skipped(make_spec: SpecFactory, mode: str) -> None:
    """Through the monitor: the verdict from the end and the patterns, a warning that
    says how much was not read line by line."""
    fake = FakeCluster()
    over = ({} if mode == "persistent" else
            {"persistent_mode": False, "log_file_pattern": "big_%j.out"})
    spec = make_spec(workflow_type="pytest", **over)
    lines = (*(FILLER.format(i=i).rstrip("\n") for i in range(60000)),
             "FAILED tests/test_a.py::test_x - AssertionError", "1 failed, 2 passed in 9.50s")
    fake.script(spec.script_path, FakeScript(lines=lines, exit_code=1, line_interval_s=0))
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.FAILED, report.render_text()
    assert report.metrics["failed"] == 1
    assert any("skipped" in w and "bytes" in w for w in report.warnings), report.warnings


def test_output_for_spec_keeps_the_limits(tmp_path: Path, make_spec: SpecFactory) -> None:
    out = output_for_spec(make_spec(workflow_type="custom"), [tmp_path / "x.log"])
    assert out.bytes_skipped == 0 and out.gaps == []


def test_only_the_last_part_of_the_skipped_bytes_is_searched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """:data:`~slurm_fsm.joboutput.SCAN_BYTES` is shared by the patterns: the bytes just
    before the end read as lines are searched, the ones before them are not, and the
    gap says so; a pattern across two chunks is counted once."""
    monkeypatch.setattr(joboutput, "FINAL_READ_BYTES", FINAL)
    monkeypatch.setattr(joboutput, "SCAN_BYTES", 2 * 256 * KIB)  # two patterns: 256 KiB
    log = tmp_path / "job.log"
    filler = "".join(FILLER.format(i=i) for i in range(8000))  # about 500 KiB
    log.write_text("Segmentation fault\n" + filler + filler + "Traceback\n" + filler[:100 * KIB]
                   + "x" * (FINAL + 1024) + "\n1 passed in 1.00s\n")
    monkeypatch.setattr("slurm_fsm.logs.LogFollower.CHUNK_BYTES", 4099)  # odd chunks
    out = JobOutput([log], patterns={"Segmentation fault": None, "Traceback": None})
    out.finish()
    # the head read (64 KiB) saw the first line; the middle is skipped
    assert out.pattern_hits == {"Segmentation fault": 1, "Traceback": 1}
    assert "the last 262144 of them searched for the success and failure patterns only, " \
        "the ones before not at all" in out.gaps[0]
