"""Every path slurm_fsm opens under a shared folder, walked (issue 20).

A fake-cluster run (persistent cold and warm, release, one-shot) records, through an
audit hook (``sys.addaudithook``, events ``open``), every file that slurm_fsm's own
code opens under ``<repo_root>/work_dirs`` and the job's ``work_dir`` (the fake
cluster's own writes, which play Slurm and the script, are left out). Then:

* each such open must refuse a symbolic link (``O_NOFOLLOW``) or create a new file
  (``O_CREAT | O_EXCL``): the paths that do neither are named in the failure;
* at each recorded path of a fresh checkout a symbolic link to a victim file is
  planted before the same run: the victim is never written, and its text never
  reaches the report (it was never read into it).

Only paths a run opens under a name an attacker can know in advance are planted
(random temp names and per-run time stamps are not).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import slurm_fsm
from slurm_fsm.errors import SlurmFsmError
from slurm_fsm.executor import Executor
from slurm_fsm.report import Report
from slurm_fsm.spec import JobSpec
from slurm_fsm.testing import FakeCluster, FakeScript, make_spec

pytestmark = pytest.mark.usefixtures("golden_reports")

PACKAGE = Path(slurm_fsm.__file__).resolve().parent
FAKE = PACKAGE / "testing"

#: Marks an open made by the fake cluster (as Slurm or the script would make it).
FAKE_FLAG = 1 << 40

#: (path, flags) of each open of the current recording; None: not recording.
_RECORDING: list[tuple[str, int]] | None = None

#: Names made unguessable on purpose (random temp names, a run's time-stamped log):
#: nobody can plant a link at them in advance.
UNPREDICTABLE = re.compile(r"\.[0-9a-f]{16}\.tmp$|\.probe\.|\.\d{8}T\d{6}"
                           r"|\.r[0-9a-f]{12}\.(owner|report)\.json$")


def _opener(frame: FrameType | None) -> Path | None:
    """The file of the first slurm_fsm frame that led to this open, or None."""
    while frame is not None:
        name = Path(frame.f_code.co_filename)
        if name.is_relative_to(PACKAGE):
            return name
        frame = frame.f_back
    return None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _RECORDING is None or event != "open":
        return
    path, _mode, flags = args
    if not isinstance(path, str | bytes | os.PathLike):
        return  # an fd
    opener = _opener(sys._getframe(1))
    if opener is None:
        return  # the test's own
    flags = int(flags or 0)
    if opener.is_relative_to(FAKE):  # the fake cluster playing Slurm and the script:
        flags |= FAKE_FLAG  # its writes are Slurm's, not slurm_fsm's
    _RECORDING.append((os.fsdecode(path), flags))


sys.addaudithook(_hook)


def record(action: Callable[[], object]) -> list[tuple[str, int]]:
    global _RECORDING
    _RECORDING = []
    try:
        action()
        return list(_RECORDING)
    finally:
        _RECORDING = None


def shared_roots(spec: JobSpec) -> tuple[Path, ...]:
    return (spec.state_path.parent, spec.work_dir)


def under(path: str, roots: tuple[Path, ...]) -> Path | None:
    """``path`` when it is a file under one of ``roots`` (the folders themselves are
    the checkout's, not planted files)."""
    p = Path(os.path.abspath(path))
    for root in roots:
        if p.is_relative_to(root) and p != root:
            return p
    return None


ONE_SHOT_SCRIPT = ("#!/bin/bash\n#SBATCH --output=llama_%j.out\n#SBATCH --error=llama_%j.err\n"
                   "#SBATCH -t 00:10:00\nsrun x\n")


def scenario(kind: str, root: Path) -> Iterator[tuple[JobSpec, Callable[[], Report]]]:
    """The runs of one scenario, each as (spec, run) over one fake cluster."""
    fake = FakeCluster()
    if kind == "one-shot":
        spec = make_spec(root, persistent_mode=False, log_file_pattern="llama_%j.out")
        spec.script_path.write_text(ONE_SHOT_SCRIPT)
        fake.script(spec.script_path, FakeScript(lines=("ok",)))
        yield spec, Executor(spec, fake, clock=fake.clock).run
        return
    spec = make_spec(root)
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    yield spec, Executor(spec, fake, clock=fake.clock).run  # cold
    yield spec, Executor(spec, fake, clock=fake.clock).run  # warm
    released = make_spec(root, release_allocation=True)
    yield released, Executor(released, fake, clock=fake.clock).run


SCENARIOS = ["persistent", "one-shot"]


def opens(kind: str, root: Path) -> tuple[list[tuple[Path, int]], list[Report]]:
    seen: list[tuple[Path, int]] = []
    reports: list[Report] = []
    for spec, run in scenario(kind, root):
        roots = shared_roots(spec)
        for path, flags in record(lambda run=run: reports.append(run())):  # type: ignore[misc]
            p = under(path, roots)
            if p is not None:
                seen.append((p, flags))
    return seen, reports


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@pytest.mark.parametrize("kind", SCENARIOS)
def test_every_open_under_a_shared_folder_refuses_a_link(tmp_path: Path, kind: str) -> None:
    seen, reports = opens(kind, tmp_path)
    assert seen, "the run opened nothing under work_dirs or work_dir: the walk sees nothing"
    assert all(r.status.value in ("PASSED", "RELEASED") for r in reports), \
        [r.summary for r in reports]
    unsafe = sorted({str(p.relative_to(tmp_path)) for p, flags in seen
                     if not flags & (NOFOLLOW | FAKE_FLAG | os.O_DIRECTORY)
                     and (flags & (os.O_CREAT | os.O_EXCL)) != (os.O_CREAT | os.O_EXCL)})
    assert unsafe == [], f"opened without O_NOFOLLOW (a planted link is followed): {unsafe}"


@pytest.mark.parametrize("kind", SCENARIOS)
def test_a_link_planted_at_every_path_is_never_written_nor_read(
        tmp_path: Path, kind: str) -> None:
    seen, _ = opens(kind, tmp_path / "walk")
    relative = sorted({p.relative_to(tmp_path / "walk") for p, flags in seen
                       if not UNPREDICTABLE.search(p.name) and not flags & FAKE_FLAG})
    # what the fake writes (the job's .out/.err, as slurmstepd would) is not ours to guard
    slurm_writes = {p.relative_to(tmp_path / "walk") for p, flags in seen
                    if flags & FAKE_FLAG and flags & (os.O_WRONLY | os.O_RDWR)}
    assert relative
    problems: list[str] = []
    for i, rel in enumerate(relative):
        root = tmp_path / f"plant{i}"
        victim = tmp_path / f"victim{i}.txt"
        text = f"PLANTED-{i} Traceback (most recent call last): FAILED\n"
        victim.write_text(text)
        link = root / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(victim)
        reports: list[Report] = []
        try:
            for _spec, run in scenario(kind, root):
                reports.append(run())
        except SlurmFsmError:
            pass  # refused with a clear error (the lock): safe
        except Exception as exc:  # reported by path below
            problems.append(f"{rel}: the run raised {type(exc).__name__}: {exc}")
        if victim.read_text() != text and rel not in slurm_writes:
            problems.append(f"{rel}: written through the planted link")
        if any(f"PLANTED-{i}" in json.dumps(r.to_dict()) for r in reports):
            problems.append(f"{rel}: read through the planted link into the report")
    assert problems == [], "\n".join(problems)
