"""Progress a person can follow, on stderr.

On a terminal, one status line (machine state, job state, elapsed time, the
log's last line) is redrawn in place and messages scroll above it; when
stderr is not a terminal, every change is a plain line and the status line
is printed at most every ``plain_interval_s`` seconds. Nothing goes to stdout.

Progress is best effort: when stderr fails (a closed pipe, ``slurm-fsm run SPEC
2>&1 | head -1``, a full disk) the first ``OSError`` silences this sink for the
rest of the run (:attr:`StderrEvents.silenced` says why) and the job goes on.
"""

from __future__ import annotations

import re
import sys
import time
from typing import TextIO

from slurm_fsm.events import Events
from slurm_fsm.runfacts import Phase

__all__ = ["StderrEvents"]

_FAILED = re.compile(r"^(\[\w+ -> Failed\]) ", re.S)


class StderrEvents(Events):
    def __init__(self, *, quiet: bool = False, stream_output: bool = False,
                 stream: TextIO | None = None, plain_interval_s: float = 30.0,
                 report_follows: bool = False) -> None:
        self.quiet = quiet
        #: a report that says why a run failed is printed after the run (the CLI, the
        #: demo): the failing transition is shown without its reason, once is enough
        self.report_follows = report_follows
        self.stream_output = stream_output
        self.out = stream or sys.stderr
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.plain_interval_s = plain_interval_s
        self._state = ""
        self._slurm_state = ""
        self._status_shown = False
        self._last_plain = 0.0
        #: the messages printed so far (bounded): a detail already shown is not repeated
        self._shown: list[str] = []
        #: Why the stream stopped being written to (the first OSError), else None.
        self.silenced: str | None = None

    def _write(self, *parts: str) -> None:
        """Write and flush, or go silent for good on the stream's first OSError."""
        if self.silenced is not None:
            return
        try:
            for part in parts:
                self.out.write(part)
            self.out.flush()
        except OSError as exc:
            self.silenced = f"{type(exc).__name__}: {exc}"

    def _clear(self) -> None:
        if self.tty and self._status_shown:
            self._write("\r\x1b[2K")
            self._status_shown = False

    def _line(self, text: str) -> None:
        if self.quiet:
            return
        self._clear()
        self._write(text.rstrip("\n") + "\n")

    def state(self, machine_state: str, detail: str = "") -> None:
        """A phase and its detail. Only ``Done``'s detail is a reason (the run's
        summary): when a failure line said it already, ``Done`` points at it
        (``(why: in the report)``); another phase's detail (``job 100``) is what it
        works on, never a "why", and is always printed."""
        self._state = machine_state
        if machine_state == Phase.DONE.value and detail \
                and any(detail in shown for shown in self._shown):
            where = "in the report" if self.report_follows else "above"
            self._line(f"[slurm-fsm] {machine_state} (why: {where})")
            return
        self._line(f"[slurm-fsm] {machine_state}" + (f": {detail}" if detail else ""))
        self._remember(detail)

    def message(self, text: str) -> None:
        failed = _FAILED.match(text)
        if failed and self.report_follows:
            self._line(f"[slurm-fsm] {failed.group(1)} (why: in the report)")
        else:
            self._line(f"[slurm-fsm] {text}")
        self._remember(text)

    def _remember(self, text: str) -> None:
        if text:
            self._shown = [*self._shown[-49:], text]

    def output(self, text: str) -> None:
        if self.quiet or not self.stream_output:
            return
        self._clear()
        self._write(text)

    def job_state(self, slurm_state: str) -> None:
        self._slurm_state = slurm_state

    def tick(self, elapsed_s: float, last_line: str) -> None:
        if self.quiet:
            return
        slurm = f" [{self._slurm_state}]" if self._slurm_state else ""
        status = f"[slurm-fsm] {self._state}{slurm} {elapsed_s:7.1f}s | {last_line[:100]}"
        if self.tty:
            self._write("\r\x1b[2K" + status)
            self._status_shown = True
        elif time.monotonic() - self._last_plain >= self.plain_interval_s:
            self._last_plain = time.monotonic()
            self._line(status)

    def close(self) -> None:
        self._clear()
        self._write()
