"""Progress on stderr: plain lines when not a terminal, a redrawn line on one."""

from __future__ import annotations

import io

from slurm_fsm.progress import StderrEvents


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    ev = StderrEvents(stream=out, stream_output=True, plain_interval_s=0)
    ev.state("Monitoring", "job 12")
    ev.job_state("PENDING")
    ev.tick(1.5, "")
    ev.job_state("RUNNING")
    ev.output("step 1 of 3\n")
    ev.tick(7.25, "step 1 of 3")
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines[0] == "[slurm-fsm] Monitoring: job 12"
    assert lines[1] == "[slurm-fsm] Monitoring [PENDING]     1.5s | "
    assert lines[2] == "step 1 of 3"
    assert lines[3] == "[slurm-fsm] Monitoring [RUNNING]     7.2s | step 1 of 3"


def test_status_line_is_redrawn_on_a_terminal() -> None:
    out = Tty()
    ev = StderrEvents(stream=out)
    ev.state("Running", "job on allocation 5")
    ev.tick(0.5, "a")
    ev.tick(1.0, "b")
    ev.message("warning: x")
    ev.close()
    text = out.getvalue()
    assert text.count("\r\x1b[2K") >= 3  # each redraw clears the line first
    assert "[slurm-fsm] warning: x\n" in text


def test_quiet_prints_nothing() -> None:
    out = io.StringIO()
    ev = StderrEvents(stream=out, quiet=True, stream_output=True, plain_interval_s=0)
    ev.state("Running")
    ev.output("text\n")
    ev.tick(1.0, "text")
    ev.message("m")
    assert out.getvalue() == ""


class ClosedPipe(io.StringIO):
    """A stream whose reader went away (``slurm-fsm run ... 2>&1 | head -1``)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, s: str) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_stream_only_silences_progress() -> None:
    out = ClosedPipe()
    ev = StderrEvents(stream=out, stream_output=True, plain_interval_s=0)
    ev.state("Running", "job on allocation 5")  # must not raise
    ev.message("m")
    ev.output("text\n")
    ev.job_state("RUNNING")
    ev.tick(1.0, "text")
    ev.close()
    assert out.writes == 1  # silent after the first failure: no retry on every poll
    assert ev.silenced is not None and "Broken pipe" in ev.silenced
