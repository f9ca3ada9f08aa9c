"""Every file beside the state file, named in one record.

A checkout keeps its allocation in one state file (``<repo_root>/work_dirs/
.slurm_alloc.json``; ``.slurm_alloc.fake.json`` for the CLI's ``--backend fake``) and
a handful of files beside it: the state file's lock, salloc's log, one record per
persistent run (and its report), the run history, the warm successor's state file and
record, the drained allocation, the warmer's log. :class:`StatePaths` names all of
them from the state file's path, the way submitit's ``JobPaths`` names every file of a
job, so that no other module builds one of these names (a test greps the package for
them). Nothing here touches the disk.

The names are those the files always had (a file written by an older version is found
again). Most siblings take the state file's name with its ``.slurm_alloc`` prefix
replaced, which keeps a fake run's files apart from a real one's::

    .slurm_alloc.json          .slurm_alloc.fake.json
    .slurm_alloc.json.lock     .slurm_alloc.fake.json.lock
    .salloc.log                .salloc.fake.log
    .slurm_run.<id>.json       .slurm_run.fake.<id>.json
    .slurm_fsm_history.jsonl   .slurm_fsm_history.fake.jsonl
    ...

A state file of another name (an ``Allocation(state_path=...)``, a test's
``state.json``) gets ``<name>.<what>`` instead (``state.json.history.jsonl``).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["RUN_ID", "STATE_NAME", "StatePaths", "successor_log_of"]

#: The state file's name in ``<repo_root>/work_dirs``.
STATE_NAME = ".slurm_alloc.json"
#: The fake CLI's state file there (``--backend fake``): beside the real one, never it.
FAKE_STATE_NAME = ".slurm_alloc.fake.json"
#: A run's id: ``r`` and 12 hex digits (never a user's word; it names files).
RUN_ID = re.compile(r"r[0-9a-f]{12}")

#: The prefix a sibling's name replaces in the state file's name.
_PREFIX = ".slurm_alloc"
_JSON = ".json"


def _renamed(name: str, prefix: str, ext: str, other: str, *, anywhere: bool) -> str:
    """The one rename rule: ``name`` with its ``.slurm_alloc`` prefix replaced by
    ``prefix`` and ``.json`` by ``ext``; ``<name>.<other><ext>`` for a name without it.

    ``anywhere``: the salloc log and the run records have always matched
    ``.slurm_alloc`` anywhere in the name (its first occurrence replaced, the ``.json``
    end optional); the history and the successor record only a name that starts with
    ``.slurm_alloc`` and ends with ``.json``. Both are kept, so that a file an older
    version wrote beside a state file of an unusual name is found again."""
    if (name.startswith(_PREFIX) and name.endswith(_JSON)) or (anywhere and _PREFIX in name):
        return name.replace(_PREFIX, prefix, 1).removesuffix(_JSON) + ext
    return f"{name}.{other}{ext}"


class StatePaths:
    """The files beside one state file (see the module). Build it with
    :meth:`for_state_file` or :meth:`for_repo`; each file is a property, a run's files
    are methods of its run id. Frozen, equal when their state files are. A plain class,
    not attrs: ``slurm-fsm logs`` reads a run's files through it and imports no attrs
    (tests/test_runlog.py)."""

    __slots__ = ("state",)

    #: the state file: the allocation's job id, container and set-up progress
    state: Path

    def __init__(self, state: Path | str) -> None:
        object.__setattr__(self, "state", Path(state))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"StatePaths is frozen: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"StatePaths is frozen: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StatePaths) and other.state == self.state

    def __hash__(self) -> int:
        return hash((StatePaths, self.state))

    def __repr__(self) -> str:
        return f"StatePaths(state={self.state!r})"

    @classmethod
    def for_state_file(cls, path: Path | str) -> StatePaths:
        """The files beside the state file ``path`` (of any name)."""
        return cls(Path(path))

    @classmethod
    def for_repo(cls, repo_root: Path | str, *, fake: bool = False) -> StatePaths:
        """A checkout's: ``<repo_root>/work_dirs/.slurm_alloc.json``, or
        ``.slurm_alloc.fake.json`` for the CLI's fake backend (``fake``)."""
        return cls(Path(repo_root) / "work_dirs" / (FAKE_STATE_NAME if fake else STATE_NAME))

    @classmethod
    def of_allocation_file(cls, path: Path | str) -> StatePaths:
        """The files of the checkout whose state, successor or drained state file is
        ``path`` (a successor's machine holds the successor's file)."""
        path = Path(path)
        for tail in (".successor.json", ".drained.json"):
            if path.name.endswith(tail) and len(path.name) > len(tail):
                return cls(path.with_name(path.name[:-len(tail)] + ".json"))
        return cls(path)

    @property
    def allocation_files(self) -> tuple[Path, Path, Path]:
        """The files that may each name a live allocation of the checkout: the state
        file, the successor's and the drained one's."""
        return self.state, self.successor_state, self.drained_state

    @property
    def folder(self) -> Path:
        """Where all of them are: the state file's folder."""
        return self.state.parent

    def moved_to(self, folder: Path) -> StatePaths:
        """The same names in another folder (the plan's scratch copy)."""
        return StatePaths(folder / self.state.name)

    def _beside(self, name: str) -> Path:
        return self.state.with_name(name)

    @property
    def lock(self) -> Path:
        """The state file's lock: ``.slurm_alloc.json.lock``."""
        return self._beside(self.state.name + ".lock")

    @property
    def salloc_log(self) -> Path:
        """salloc's output: ``.salloc.log`` (``.salloc.fake.log``)."""
        return self._beside(_renamed(self.state.name, ".salloc", ".log", "salloc",
                                     anywhere=True))

    @property
    def successor_salloc_log(self) -> Path:
        """The warm successor's salloc output: ``.salloc.log.successor``."""
        return successor_log_of(self.salloc_log)

    @property
    def history(self) -> Path:
        """The run history: ``.slurm_fsm_history.jsonl`` (``.slurm_fsm_history.fake.jsonl``:
        a fake run never feeds the real estimate)."""
        return self._beside(_renamed(self.state.name, ".slurm_fsm_history", ".jsonl",
                                     "history", anywhere=False))

    @property
    def image_cache(self) -> Path:
        """The cache of installed container images, when no shared folder is configured
        (:mod:`slurm_fsm.imagecache`): the folder ``.slurm_fsm_image_cache``
        (``.slurm_fsm_image_cache.fake`` for the fake backend's state file)."""
        return self._beside(_renamed(self.state.name, ".slurm_fsm_image_cache", "",
                                     "image-cache", anywhere=False))

    @property
    def successor_state(self) -> Path:
        """The warm successor's state file: ``.slurm_alloc.successor.json``."""
        return self._beside(self.state.stem + ".successor.json")

    @property
    def successor_record(self) -> Path:
        """Which allocation the successor follows, and its phase:
        ``.slurm_fsm_successor.json`` (``.slurm_fsm_successor.fake.json``)."""
        return self._beside(_renamed(self.state.name, ".slurm_fsm_successor", _JSON,
                                     "successor", anywhere=False))

    @property
    def drained_state(self) -> Path:
        """The allocation a switch replaced while other runs still used it:
        ``.slurm_alloc.drained.json``."""
        return self._beside(self.state.stem + ".drained.json")

    @property
    def warmer_log(self) -> Path:
        """The detached warmer's output: ``.slurm_fsm_warmer.log``."""
        return self._beside(".slurm_fsm_warmer.log")

    @property
    def run_stem(self) -> str:
        """What every run file's name starts with: ``.slurm_run`` (``.slurm_run.fake``)."""
        return _renamed(self.state.name, ".slurm_run", "", "run", anywhere=True)

    def run_record(self, run_id: str) -> Path:
        """A persistent run's record (its lease): ``.slurm_run.<run id>.json``."""
        return self._beside(f"{self.run_stem}.{_checked(run_id)}.json")

    def run_report(self, run_id: str) -> Path:
        """A run's saved report: ``.slurm_run.<run id>.report.json``
        (:mod:`slurm_fsm.runowner`)."""
        return self._beside(f"{self.run_stem}.{_checked(run_id)}.report.json")

    def run_owner(self, run_id: str) -> Path:
        """A run's owner record: ``.slurm_run.<run id>.owner.json``
        (:mod:`slurm_fsm.runowner`)."""
        return self._beside(f"{self.run_stem}.{_checked(run_id)}.owner.json")

    def run_progress(self, run_id: str) -> Path:
        """A detached run's progress (its supervisor's output): ``.slurm_run.<run id>.out``."""
        return self._beside(f"{self.run_stem}.{_checked(run_id)}.out")

    def run_status(self, run_id: str) -> Path:
        """A persistent run's script's exit status as its guard saw it end:
        ``.slurm_run.<run id>.status`` (:data:`slurm_fsm.scriptguard.STATUS_ENV`)."""
        return self._beside(f"{self.run_stem}.{_checked(run_id)}.status")

    def run_cancel(self, run_id: str) -> Path:
        """A ``slurm-fsm cancel`` asked of a run, written before any process is told:
        ``.slurm_run.<run id>.cancel`` (:meth:`slurm_fsm.runowner.RunFiles.ask_cancel`)."""
        return self._beside(f"{self.run_stem}.{_checked(run_id)}.cancel")

    def run_owner_id_of(self, name: str) -> str | None:
        """The run id when ``name`` is an owner record's name beside this state file."""
        head, _, tail = name.partition(f"{self.run_stem}.")
        run_id, _, ext = tail.partition(".")
        return run_id if not head and ext == "owner.json" and RUN_ID.fullmatch(run_id) \
            else None

    def run_id_of(self, name: str) -> str | None:
        """The run id when ``name`` is a run record's name beside this state file
        (not its report's, nor another state file's record); else None."""
        stem, _, rest = name.rpartition(".")[0].rpartition(".")
        run_id = rest if stem == self.run_stem and name.endswith(_JSON) else ""
        return run_id if RUN_ID.fullmatch(run_id) else None


def successor_log_of(salloc_log: Path) -> Path:
    """The warm successor's salloc output beside the salloc log ``salloc_log`` (a
    machine may be given a log of its own): ``<salloc_log>.successor``."""
    return salloc_log.with_name(salloc_log.name + ".successor")


def _checked(run_id: str) -> str:
    if not RUN_ID.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r} is not 'r' and 12 hex digits")
    return run_id
