"""Where a run's log is, read from its files alone: the fast path of ``slurm-fsm logs
RUN_ID`` (issue 39: "answers within 0.5 s in any state").

:attr:`slurm_fsm.detach.RunView.log` says where a run's log is, from the run's owner
record and its saved report, parsed whole (attrs classes, the report's cattrs
converter, the spec): most of the command's time was import. Here the same two files
are read as plain JSON for the one field each that names the log, with the same
rule: the owner record's ``log`` (the job has started), else the saved report's
``log_files.stdout``, else the owner record's ``progress`` (a detached run before its
job starts). Nothing is asked of Slurm. When neither file names a log (or one cannot
be read), :func:`log_of` says so (None) and the CLI takes the full path, which says why
(tests/test_runlog.py keeps the two equal on runs in every state, and keeps this
module's imports lean).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slurm_fsm.errors import FileProblem
from slurm_fsm.files import read_bounded
from slurm_fsm.paths import RUN_ID, StatePaths

__all__ = ["MAX_BYTES", "log_of"]

#: The most bytes an owner record or a saved report may have (here and in
#: :mod:`slurm_fsm.runowner`, which takes it from here).
MAX_BYTES = 4 << 20


def _read(path: Path, run_id: str) -> dict[str, Any] | None:
    """The JSON object of a run file, when it is one and names ``run_id``."""
    try:
        data = json.loads(read_bounded(path, MAX_BYTES, follow=False, owned=True))
    except (FileProblem, OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("run_id") == run_id else None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def log_of(repo: Path | str, run_id: str) -> Path | None:
    """The log of run ``run_id`` of checkout ``repo`` as its files name it (the real
    backend's run files first, then the fake one's, as :func:`slurm_fsm.detach.find`);
    None when no file names one, or there is no such run."""
    if not RUN_ID.fullmatch(run_id):
        return None
    for fake in (False, True):
        paths = StatePaths.for_repo(repo, fake=fake)
        owner = _read(paths.run_owner(run_id), run_id)
        saved = _read(paths.run_report(run_id), run_id)
        if owner is None and saved is None:
            continue
        if owner is not None and _text(owner.get("log")):
            return Path(_text(owner.get("log")))
        report = saved.get("report") if saved is not None else None
        log_files = report.get("log_files") if isinstance(report, dict) else None
        stdout = log_files.get("stdout") if isinstance(log_files, dict) else None
        if stdout:
            return Path(str(stdout))
        progress = _text(owner.get("progress")) if owner is not None else ""
        return Path(progress) if progress else None
    return None
