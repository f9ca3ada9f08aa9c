"""Where a run's log is, read from its files alone: the fast path of ``slurm-fsm logs
RUN_ID`` (issue 39: "answers within 0.5 s in any state").

:attr:`slurm_fsm.detach.RunView.log` says where a run's log is, from the run's owner
record and its saved report, parsed whole (attrs classes, the report's cattrs
converter, the spec): most of the command's time was import. Here the same two files
are read as plain JSON for the one field each that names the log, with the same
rule: the owner record's ``log`` (the job has started), else the saved report's
``log_files.stdout``, else the owner record's ``progress`` (a detached run before its
job starts). Nothing is asked of Slurm. When neither file names a log (or one cannot
be read), :func:`where` still says the run's state (:func:`state_of`, the rule
:attr:`~slurm_fsm.detach.RunView.state` uses too), and the CLI says there is no log
yet. tests/test_runlog.py keeps the two paths equal on runs in every state, and this
module's imports lean.

It is the one reader of a run's files outside :mod:`slurm_fsm.convert` (issue 40 item
5), on purpose: importing cattrs and the record classes is most of what the fast path
saves, and it reads two fields, not records; :class:`slurm_fsm.runowner.OwnerRecord`
and :class:`~slurm_fsm.runowner.SavedReport` stay the full readers.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from slurm_fsm.errors import FileProblem
from slurm_fsm.files import read_bounded
from slurm_fsm.paths import RUN_ID, StatePaths

__all__ = ["MAX_BYTES", "RunState", "log_of", "process_alive", "state_of", "where"]


class RunState:
    """What a run is doing, as its files say (strings, for the CLI's table)."""

    STARTING = "starting"
    RUNNING = "running"
    DONE = "done"
    #: the owner is gone and no report was saved: :func:`slurm_fsm.detach.settle`
    #: rebuilds it
    LOST = "lost"


def process_alive(host: str, boot: str, pid: int, pid_ticks: int) -> bool | None:
    """Is the process ``pid`` (started at ``pid_ticks``, on ``host`` in boot ``boot``)
    alive? True or False on its own host; None on another host: it cannot be told
    from here (:func:`slurm_fsm.runowner.owner_alive`)."""
    from slurm_fsm.scriptguard import boot_id, live_start_ticks  # ctypes: when asked

    if host != socket.gethostname():
        return None
    if boot != boot_id():
        return False
    return live_start_ticks(pid) == pid_ticks


def state_of(*, saved: bool, has_owner: bool, owner_alive: bool | None, phase: str) -> str:
    """A run's :class:`RunState` from its files: a saved report, its owner record (whose
    owner is alive, or cannot be told: None) and the record's phase."""
    if saved:
        return RunState.DONE
    if not has_owner or owner_alive is False:
        return RunState.LOST
    return RunState.STARTING if phase == "starting" else RunState.RUNNING

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


def where(repo: Path | str, run_id: str) -> tuple[Path | None, str] | None:
    """The log of run ``run_id`` of checkout ``repo`` as its files name it (None: none
    yet) and the run's state; the real backend's run files first, then the fake one's,
    as :func:`slurm_fsm.detach.find`. None when there is no such run (or its files
    cannot be read as such)."""
    if not RUN_ID.fullmatch(run_id):
        return None
    for fake in (False, True):
        paths = StatePaths.for_repo(repo, fake=fake)
        owner = _read(paths.run_owner(run_id), run_id)
        saved = _read(paths.run_report(run_id), run_id)
        if owner is None and saved is None:
            continue
        alive = _owner_alive(owner) if owner is not None and saved is None else None
        state = state_of(saved=saved is not None, has_owner=owner is not None,
                         owner_alive=alive, phase=_text(owner.get("phase", "starting"))
                         if owner is not None else "")
        return _log(owner, saved), state
    return None


def log_of(repo: Path | str, run_id: str) -> Path | None:
    """The log of run ``run_id`` as its files name it (:func:`where`); None when none does."""
    found = where(repo, run_id)
    return found[0] if found is not None else None


def _owner_alive(owner: dict[str, Any]) -> bool | None:
    pid, ticks = owner.get("pid"), owner.get("pid_ticks")
    if not isinstance(pid, int) or not isinstance(ticks, int):
        return False
    return process_alive(_text(owner.get("host")), _text(owner.get("boot_id")), pid, ticks)


def _log(owner: dict[str, Any] | None, saved: dict[str, Any] | None) -> Path | None:
    """:attr:`slurm_fsm.detach.RunView.log`'s rule, on the files' JSON."""
    if owner is not None and _text(owner.get("log")):
        return Path(_text(owner.get("log")))
    report = saved.get("report") if saved is not None else None
    log_files = report.get("log_files") if isinstance(report, dict) else None
    stdout = log_files.get("stdout") if isinstance(log_files, dict) else None
    if stdout:
        return Path(str(stdout))
    progress = _text(owner.get("progress")) if owner is not None else ""
    return Path(progress) if progress else None
