"""``scancel`` for a persistent run's script: "its own job" is this run's steps.

In persistent mode the script runs as ``bash <script>`` with ``SLURM_JOB_ID`` set to
the shared allocation, which other runs' jobs use at the same time. A script written
for ``sbatch`` that ends with ``scancel ${SLURM_JOB_ID}`` (TensorRT-LLM's
``disaggr_torch.slurm`` does, to stop its ``srun ... &`` servers) would cancel the
allocation and every sibling job in it.

:func:`slurm_fsm.placement.script_env` therefore puts a directory first on the
script's ``PATH`` holding a ``scancel`` that runs this module
(``python -I -S scancelshim.py ARGS``). It passes every call to the real
``scancel`` (the next one on ``PATH``) unchanged except:

* a job id that is the allocation (:data:`ALLOCATION_ENV`, bare, no ``.step``)
  becomes the ids of this run's steps (``ALLOC.N``: the steps whose ``srun`` runs on
  this host in the script's process group, from ``scontrol -o show step``); options
  such as ``--signal=USR1`` are kept, so a signal goes to those steps. With no step
  of this run left there is nothing to cancel: it says so and exits 0;
* ``--batch`` with the allocation, and a ``scancel`` with filters but no job id
  (``-u``, ``--name``, ``--me``, ...: they would select the allocation too), are
  refused: a message on stderr, exit 1, no Slurm command.

The script itself is not stopped (under ``sbatch``, ``scancel`` of the job would
end the batch shell too): it goes on and its exit status counts as usual.
An explicit step id (``ALLOC.3``) and any other job id are passed on untouched.

Standard library only, no slurm_fsm import: it is started by path with
``python -I -S``, like :mod:`slurm_fsm.scriptguard`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["ALLOCATION_ENV", "Plan", "main", "needs_steps", "own_steps", "plan", "shim_dir",
           "shim_env", "shim_text"]

#: The variable that names the allocation to the shim (set by ``script_env``).
ALLOCATION_ENV = "SLURM_FSM_ALLOCATION_ID"
#: How long one ``scontrol`` / ``scancel`` may take.
TIMEOUT_S = 60.0

#: scancel options that take a value (short and long forms)
_VALUE_SHORT = frozenset("AMnpqRstuw")
_VALUE_LONG = frozenset({"account", "clusters", "cluster", "jobname", "name", "partition",
                         "qos", "reservation", "signal", "state", "user", "nodelist",
                         "wckey", "sibling"})
#: options that select jobs by something other than their id
_FILTER_SHORT = frozenset("AnpqRtuw")
_FILTER_LONG = frozenset({"account", "jobname", "name", "partition", "qos", "reservation",
                          "state", "user", "nodelist", "wckey", "me"})


class Plan:
    """What one ``scancel`` call becomes: ``argv`` for the real scancel (None: run
    nothing), ``message`` for stderr and the exit status when nothing is run."""

    def __init__(self, argv: list[str] | None, message: str = "", status: int = 0) -> None:
        self.argv = argv
        self.message = message
        self.status = status

    def __repr__(self) -> str:
        return f"Plan({self.argv!r}, {self.message!r}, {self.status})"


def _split(args: Sequence[str]) -> tuple[list[str], list[str], set[str]]:
    """(options with their values, job ids, the option names seen)."""
    options: list[str] = []
    ids: list[str] = []
    names: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            ids.extend(args[i + 1:])
            break
        if arg.startswith("--"):
            name, eq, _ = arg[2:].partition("=")
            names.add(name)
            options.append(arg)
            if not eq and name in _VALUE_LONG and i + 1 < len(args):
                options.append(args[i + 1])
                i += 1
        elif arg.startswith("-") and len(arg) > 1:
            options.append(arg)
            for j, ch in enumerate(arg[1:], start=1):
                names.add(ch)
                if ch in _VALUE_SHORT:
                    if j == len(arg) - 1 and i + 1 < len(args):
                        options.append(args[i + 1])
                        i += 1
                    break
        else:
            ids.append(arg)
        i += 1
    return options, ids, names


def plan(args: Sequence[str], allocation: str, steps: Sequence[str] | None) -> Plan:
    """What ``scancel ARGS`` does in a run on ``allocation`` whose own steps are
    ``steps`` (step numbers; None: not looked up yet, the caller looks them up when
    :func:`needs_steps` says so)."""
    options, ids, names = _split(args)
    if not allocation:
        return Plan(list(args))
    filters = sorted(n for n in names if n in _FILTER_SHORT or n in _FILTER_LONG)
    if not ids and filters:
        return Plan(None, f"slurm_fsm: refused `scancel {shlex.join(args)}`: this script "
                    f"runs in the shared allocation {allocation} (persistent mode), which "
                    f"these filters would cancel too; name the job or step ids to cancel "
                    f"(`scancel $SLURM_JOB_ID` cancels this run's own steps)", 1)
    if allocation not in ids:
        return Plan(list(args))
    if "b" in names or "batch" in names:
        return Plan(None, f"slurm_fsm: refused `scancel {shlex.join(args)}`: in persistent "
                    f"mode {allocation} is the shared allocation and has no batch step of "
                    "this run; `scancel $SLURM_JOB_ID` (without --batch) cancels this run's "
                    "own steps", 1)
    mine = [f"{allocation}.{s}" for s in (steps or ())]
    others = [i for i in ids if i != allocation]
    if not mine and not others:
        return Plan(None, f"slurm_fsm: scancel {allocation}: no step of this run is "
                    f"running on the shared allocation {allocation}; nothing to cancel "
                    "(the allocation itself is never cancelled by a run's script)", 0)
    return Plan([*options, *others, *mine],
                f"slurm_fsm: scancel {allocation} -> this run's steps "
                f"{' '.join(mine) or '(none)'} (persistent mode: {allocation} is the "
                "shared allocation, never cancelled by a run's script)")


def needs_steps(args: Sequence[str], allocation: str) -> bool:
    """Whether :func:`plan` needs this run's steps (the allocation's id is named)."""
    return bool(allocation) and allocation in _split(args)[1]


def _pgid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[-1].split()
        return int(fields[2])
    except (OSError, ValueError, IndexError):
        return None


def own_steps(scontrol_out: str, allocation: str, host: str, pgid: int,
              pgid_of: Callable[[int], int | None] | None = None) -> list[str]:
    """The numbered steps of ``allocation`` in ``scontrol -o show step`` output whose
    ``srun`` runs on ``host`` in process group ``pgid`` (``pgid_of``: a pid's group,
    from ``/proc`` by default)."""
    find = pgid_of or _pgid_of
    found = []
    for line in scontrol_out.splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        job, _, step = fields.get("StepId", "").partition(".")
        srun_host, _, pid = fields.get("SrunHost:Pid", "").rpartition(":")
        if (job == allocation and step.isdigit() and srun_host == host and pid.isdigit()
                and find(int(pid)) == pgid):
            found.append(step)
    return found


def _real_scancel() -> str | None:
    here = Path(__file__).resolve()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry:
            continue
        candidate = Path(entry) / "scancel"
        try:
            if _is_shim(candidate, here):
                continue
        except OSError:
            continue
        if os.access(candidate, os.X_OK) and candidate.is_file():
            return str(candidate)
    return None


def _is_shim(candidate: Path, module: Path) -> bool:
    with open(candidate, "rb") as fh:
        head = fh.read(4096)
    return str(module).encode() in head


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    allocation = os.environ.get(ALLOCATION_ENV, "")
    real = _real_scancel()
    if real is None:
        print("slurm_fsm: scancel: no scancel found on PATH after slurm_fsm's own",
              file=sys.stderr)
        return 127
    steps: list[str] | None = None
    if needs_steps(args, allocation):
        try:
            done = subprocess.run(  # noqa: S603 - an argument list
                [shutil.which("scontrol") or "scontrol", "-o", "show", "step", allocation],
                capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"slurm_fsm: scancel: could not list the steps of {allocation}: {exc}; "
                  "nothing cancelled", file=sys.stderr)
            return 1
        steps = own_steps(done.stdout, allocation, socket.gethostname(), os.getpgrp())
    p = plan(args, allocation, steps)
    if p.message:
        print(p.message, file=sys.stderr)
    if p.argv is None:
        return p.status
    try:
        return subprocess.run([real, *p.argv], timeout=TIMEOUT_S,  # noqa: S603
                              check=False).returncode
    except subprocess.TimeoutExpired:
        print(f"slurm_fsm: scancel: {real} took over {TIMEOUT_S:.0f} s", file=sys.stderr)
        return 1


# ------------------------------------------------------------ where the shim lives


def shim_text(python: str | None = None) -> str:
    """The ``scancel`` file: runs this module with the orchestrator's interpreter."""
    exe = python or sys.executable or "python3"
    return ("#!/bin/sh\n# slurm_fsm: scancel for a persistent run's script "
            "(see slurm_fsm.scancelshim)\n"
            f"exec {shlex.quote(exe)} -I -S {shlex.quote(str(Path(__file__).resolve()))} "
            '"$@"\n')


def _private_dir(path: Path) -> Path:
    """``path`` as a directory of this user's only (made 0700 when missing); OSError
    when it is a link, another user's or open to others."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise OSError(f"{path} is not a private directory of this user")
    return path


def shim_dir(base: Path | None = None) -> Path:
    """A directory of this user's holding the ``scancel`` shim (made once per
    interpreter and slurm_fsm install; the same path for every run)."""
    text = shim_text()
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    root = base or Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    top = _private_dir(root / f"slurm_fsm-{os.getuid()}")
    where = _private_dir(top / f"shim-{digest}")
    target = where / "scancel"
    try:
        if target.read_text(encoding="utf-8") == text:
            return where
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=where, prefix=".scancel.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return where


def shim_env(path: str) -> dict[str, str]:
    """The variables that put the shim first on a script's ``PATH`` (``path``: the
    PATH it would have otherwise). Where no private directory can be made, a bash
    function ``scancel`` is exported instead (bash scripts and their bash children
    still get the shim)."""
    base_path = path
    env = {}
    try:
        env["PATH"] = f"{shim_dir()}{os.pathsep}{base_path}"
    except OSError:
        env["PATH"] = base_path
        exe = shlex.quote(sys.executable or "python3")
        env["BASH_FUNC_scancel%%"] = (
            f"() {{ {exe} -I -S {shlex.quote(str(Path(__file__).resolve()))} \"$@\"; }}")
    return env


if __name__ == "__main__":
    sys.exit(main())
