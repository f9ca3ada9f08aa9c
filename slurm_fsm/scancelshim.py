"""``scancel`` for a persistent run's script: "its own job" is this run's steps.

In persistent mode the script runs as ``bash <script>`` with ``SLURM_JOB_ID`` set to
the shared allocation, which other runs' jobs use at the same time. A script written
for ``sbatch`` that ends with ``scancel ${SLURM_JOB_ID}`` (TensorRT-LLM's
``disaggr_torch.slurm`` does, to stop its ``srun ... &`` servers) would cancel the
allocation and every sibling job in it.

:func:`slurm_fsm.placement.script_env` therefore puts a directory first on the
script's ``PATH`` holding a ``scancel`` that runs this module
(``python -I -S scancelshim.py ARGS``). It reads the call as ``scancel`` does
(getopt_long: unique prefixes of long options, bundled short options, values inline
or apart; job ids as numbers, ``007`` is job 7, in comma lists; the ``SCANCEL_*``
variables as the options they stand for) and runs the real ``scancel`` (the next one on
``PATH``) only with what it understood, written out in full (``--signal=USR1 7.2``),
with no ``SCANCEL_*`` variable. What it cannot prove harmless is refused: a message
on stderr, exit 1, no Slurm command:

* the allocation (:data:`ALLOCATION_ENV`, bare, in any spelling) becomes the ids of
  this run's steps (``ALLOC.N``: the steps whose ``srun`` runs on this host in the
  script's process group, from ``scontrol -o show step``); options such as
  ``--signal=USR1`` are kept, so a signal goes to those steps. With no step of this
  run left there is nothing to cancel: it says so and exits 0;
* a step of the allocation that is not this run's (a sibling job's), or the
  allocation's ``batch``/``extern`` step, array or het forms: refused;
* ``--batch`` with the allocation, and filters with no job id (``-u``, ``--name``,
  ``--me``, ``--state``, ``--nodelist``, ..., or their ``SCANCEL_*`` variables: they
  would select the allocation too): refused. With ids, filters only narrow, and pass;
* ``--clusters``/``-M``, ``--sibling`` and ``SLURM_CLUSTERS`` (jobs of another
  cluster), an option or ``SCANCEL_*`` variable it does not know (a newer Slurm's), an
  ambiguous prefix, an id it cannot read: refused.

The script itself is not stopped (under ``sbatch``, ``scancel`` of the job would
end the batch shell too): it goes on and its exit status counts as usual.
Any other job id is passed on (in full digits).

The same directory holds ``salloc`` and ``sbatch`` (:data:`SUBMIT_TOOLS`, small ``sh``
files, :func:`submit_shim_text`): what the persistent path exports (the allocation's
id and nodes, and the job's share: ``SRUN_CPUS_PER_TASK``, ``SLURM_GPUS_PER_NODE``,
``SLURM_EXACT``...) is for this run's own steps, and would make the job a script
submits itself ask what its own allocation does not hold ("More processors requested
than permitted", "Step requested GRES but job doesn't have GRES"). They unset the
variables :data:`SCRIPT_VARS_ENV` names (set by ``script_env``), and this module's
own, take their directory off ``PATH`` and run the real tool: the job is submitted
with the environment the script would have outside the allocation, as in one-shot
mode.

Standard library only, no slurm_fsm import: it is started by path with
``python -I -S``, like :mod:`slurm_fsm.scriptguard`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["ALLOCATION_ENV", "ENV_OPTIONS", "OPTIONS", "SCRIPT_VARS_ENV", "SUBMIT_TOOLS",
           "Parsed", "Plan", "Refused", "main", "needs_steps", "own_steps", "parse", "plan",
           "shim_dir", "shim_env", "shim_text", "submit_shim_text"]

#: The variable that names the allocation to the shim (set by ``script_env``).
ALLOCATION_ENV = "SLURM_FSM_ALLOCATION_ID"
#: The variable that names (space-separated) what the persistent path exported for the
#: run's own steps (set by ``script_env``): the ``salloc``/``sbatch`` shims unset them.
SCRIPT_VARS_ENV = "SLURM_FSM_SCRIPT_VARS"
#: The tools that submit a job of the script's own (not a step of this run)
SUBMIT_TOOLS = ("salloc", "sbatch")
#: How long one ``scontrol`` / ``scancel`` may take.
TIMEOUT_S = 60.0

#: scancel's options (its man page, Slurm 22.05-26.05): long name -> (short letter or
#: "", takes a value, kind). Kinds: "filter" selects jobs by something other than their
#: id (only narrows when ids are given; refused without ids: it would select the
#: allocation too), "plain" changes nothing about which jobs are hit, "refused" can
#: select jobs on another cluster or federation member, which the shim cannot check.
#: An option not here (a newer Slurm's) is refused: what cannot be proved harmless.
#: 26.05 adds ``--admin-comment`` (sets the job's AdminComment; admins only) and ``-c,
#: --cron`` (confirms the cancel of a scrontab job): neither selects jobs (issue 44).
OPTIONS: dict[str, tuple[str, bool, str]] = {
    "account": ("A", True, "filter"), "admin-comment": ("", True, "plain"),
    "batch": ("b", False, "plain"),
    "clusters": ("M", True, "refused"), "cluster": ("M", True, "refused"),
    "cron": ("c", False, "plain"), "ctld": ("", False, "plain"),
    "full": ("f", False, "plain"), "help": ("", False, "plain"),
    "hurry": ("H", False, "plain"), "interactive": ("i", False, "plain"),
    "jobname": ("n", True, "filter"), "me": ("", False, "filter"),
    "name": ("n", True, "filter"), "nodelist": ("w", True, "filter"),
    "partition": ("p", True, "filter"), "qos": ("q", True, "filter"),
    "quiet": ("Q", False, "plain"), "reservation": ("R", True, "filter"),
    "sibling": ("", True, "refused"), "signal": ("s", True, "plain"),
    "state": ("t", True, "filter"), "usage": ("", False, "plain"),
    "user": ("u", True, "filter"), "verbose": ("v", False, "plain"),
    "version": ("V", False, "plain"), "wckey": ("", True, "filter"),
}
#: short letter -> the long name written out for the real scancel
_SHORT = {short: name for name, (short, _v, _k) in OPTIONS.items()
          if short and name not in ("cluster", "jobname")}
#: the variables scancel reads as options (its man page, INPUT ENVIRONMENT VARIABLES)
ENV_OPTIONS = {"SCANCEL_ACCOUNT": "account", "SCANCEL_BATCH": "batch",
               "SCANCEL_CRON": "cron", "SCANCEL_CTLD": "ctld", "SCANCEL_FULL": "full",
               "SCANCEL_HURRY": "hurry",
               "SCANCEL_INTERACTIVE": "interactive", "SCANCEL_NAME": "name",
               "SCANCEL_PARTITION": "partition", "SCANCEL_QOS": "qos",
               "SCANCEL_STATE": "state", "SCANCEL_USER": "user",
               "SCANCEL_VERBOSE": "verbose", "SCANCEL_WCKEY": "wckey",
               "SLURM_CLUSTERS": "clusters"}
#: one job id element as scancel reads it: job, array task or range, het component,
#: step (numbers may have leading zeros: scancel reads them as numbers)
_ID = re.compile(r"(\d+)(?:_(\d+|\[[\d,%-]+\]))?(?:\+(\d+))?(?:\.(\d+|batch|extern))?")


class Plan:
    """What one ``scancel`` call becomes: ``argv`` for the real scancel (None: run
    nothing), ``message`` for stderr and the exit status when nothing is run."""

    def __init__(self, argv: list[str] | None, message: str = "", status: int = 0) -> None:
        self.argv = argv
        self.message = message
        self.status = status

    def __repr__(self) -> str:
        return f"Plan({self.argv!r}, {self.message!r}, {self.status})"


class Refused(Exception):
    """A call the shim will not pass on: its message says why."""


class Parsed:
    """One ``scancel`` call as scancel reads it: ``options`` (long name, value or
    None) in order, the variables' first, and the job id elements (comma lists split),
    each as (job number, rest of the id with its numbers as numbers)."""

    def __init__(self) -> None:
        self.options: list[tuple[str, str | None]] = []
        self.ids: list[tuple[int, str]] = []

    def kinds(self) -> set[str]:
        return {OPTIONS[name][2] for name, _ in self.options}

    def names(self) -> set[str]:
        return {name for name, _ in self.options}


def _long(arg: str) -> tuple[str, str | None]:
    """``--prefix[=value]``: the option's full name (getopt_long: an exact name or a
    unique prefix; aliases of one option count once) and its inline value."""
    text, eq, value = arg[2:].partition("=")
    if text in OPTIONS:
        return text, value if eq else None
    found = {n for n in OPTIONS if n.startswith(text)} if text else set()
    letters = {OPTIONS[n][0] or n for n in found}
    if len(letters) != 1:
        raise Refused(f"`{arg}` is {'ambiguous' if found else 'not an option'} "
                      "of scancel as slurm_fsm knows it")
    return sorted(found, key=len)[0], value if eq else None


def _element(text: str) -> tuple[int, str]:
    m = _ID.fullmatch(text)
    if m is None:
        raise Refused(f"`{text}` is not a job or step id as slurm_fsm reads them")
    job, task, het, step = m.groups()
    rest = (f"_{int(task)}" if task and task.isdigit() else f"_{task}" if task else "")
    rest += f"+{int(het)}" if het is not None else ""
    rest += f".{int(step) if step.isdigit() else step}" if step is not None else ""
    return int(job), rest


def _ids(arg: str) -> list[tuple[int, str]]:
    """The elements of one id argument: a comma list (commas inside an array's
    brackets belong to it)."""
    return [_element(e) for e in re.split(r",(?![^\[]*\])", arg)]


def parse(args: Sequence[str], env: Mapping[str, str] | None = None) -> Parsed:
    """``scancel ARGS`` with the variables ``env`` as scancel reads them (getopt_long
    with permutation; the variables first). Raises :class:`Refused`."""
    out = Parsed()
    for var, text in sorted((env or {}).items()):
        if var.startswith("SCANCEL_") or var == "SLURM_CLUSTERS":
            if var not in ENV_OPTIONS:
                raise Refused(f"{var} is set: not a variable of scancel slurm_fsm knows")
            out.options.append((ENV_OPTIONS[var],
                                text if OPTIONS[ENV_OPTIONS[var]][1] else None))
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            for rest in args[i:]:
                out.ids += _ids(rest)
            break
        if arg.startswith("--"):
            name, value = _long(arg)
            if OPTIONS[name][1] and value is None:
                if i >= len(args):
                    raise Refused(f"`{arg}` needs a value")
                value, i = args[i], i + 1
            elif not OPTIONS[name][1] and value is not None:
                raise Refused(f"`{arg}` takes no value")
            out.options.append((name, value))
        elif arg.startswith("-") and arg != "-":
            i = _short(arg, args, i, out)
        else:
            out.ids += _ids(arg)
    return out


def _short(arg: str, args: Sequence[str], i: int, out: Parsed) -> int:
    """One bundle of short options (``-bQ``, ``-sKILL``, ``-s KILL``) into ``out``;
    returns the index of the next argument."""
    for j, ch in enumerate(arg[1:], start=1):
        if ch not in _SHORT:
            raise Refused(f"`-{ch}` is not an option of scancel as slurm_fsm knows it")
        name = _SHORT[ch]
        if not OPTIONS[name][1]:
            out.options.append((name, None))
            continue
        if j < len(arg) - 1:
            out.options.append((name, arg[j + 1:]))
            return i
        if i >= len(args):
            raise Refused(f"`-{ch}` needs a value")
        out.options.append((name, args[i]))
        return i + 1
    return i


def _canonical(options: Sequence[tuple[str, str | None]]) -> list[str]:
    """The options written out in full, for the real scancel (a later one of the same
    name wins, as on scancel's command line over its variables)."""
    last: dict[str, str | None] = {}
    for name, value in options:
        last.pop(name, None)
        last[name] = value
    return [f"--{n}" if v is None else f"--{n}={v}" for n, v in last.items()]


def _refusal(args: Sequence[str], allocation: str, why: str) -> Plan:
    return Plan(None, f"slurm_fsm: refused `scancel {shlex.join(args)}`: {why}; this "
                f"script runs in the shared allocation {allocation} (persistent mode); "
                "name the job or step ids to cancel (`scancel $SLURM_JOB_ID` cancels this "
                "run's own steps)", 1)


def plan(args: Sequence[str], allocation: str, steps: Sequence[str] | None,
         env: Mapping[str, str] | None = None) -> Plan:
    """What ``scancel ARGS`` (with the variables ``env``) does in a run on
    ``allocation`` whose own steps are ``steps`` (step numbers; None: not looked up yet,
    the caller looks them up when :func:`needs_steps` says so). The real scancel is
    only ever run with what was understood, written out in full, ids as plain numbers."""
    if not allocation:
        return Plan(list(args))
    try:
        parsed = parse(args, env)
    except Refused as exc:
        return _refusal(args, allocation, str(exc))
    kinds, alloc = parsed.kinds(), int(allocation)
    if "refused" in kinds:
        return _refusal(args, allocation, "it can select jobs on another cluster, which "
                        "slurm_fsm cannot check")
    if not parsed.ids and "filter" in kinds:
        return _refusal(args, allocation, "these filters would cancel the allocation too")
    ours = [(job, rest) for job, rest in parsed.ids if job == alloc]
    if ours and "batch" in parsed.names():
        return _refusal(args, allocation, f"--batch: {allocation} is the shared "
                        "allocation and has no batch step of this run")
    own = {str(int(s)) for s in (steps or ())}
    for _job, rest in ours:
        if rest and not (rest[0] == "." and rest[1:] in own):
            return _refusal(args, allocation, f"{allocation}{rest} is not a step of this "
                            "run")
    others = list(dict.fromkeys(f"{job}{rest}" for job, rest in parsed.ids
                                if job != alloc or rest))
    mine = [f"{allocation}.{s}" for s in sorted(own, key=int)
            if any(rest == "" for _j, rest in ours)]
    others = [i for i in others if i not in mine]
    if not parsed.ids:
        return Plan(_canonical(parsed.options))
    if not mine and not others:
        return Plan(None, f"slurm_fsm: scancel {allocation}: no step of this run is "
                    f"running on the shared allocation {allocation}; nothing to cancel "
                    "(the allocation itself is never cancelled by a run's script)", 0)
    message = (f"slurm_fsm: scancel {allocation} -> this run's steps {' '.join(mine)} "
               f"(persistent mode: {allocation} is the shared allocation, never "
               "cancelled by a run's script)") if any(r == "" for _j, r in ours) else ""
    return Plan([*_canonical(parsed.options), *others, *mine], message)


def needs_steps(args: Sequence[str], allocation: str,
                env: Mapping[str, str] | None = None) -> bool:
    """Whether :func:`plan` needs this run's steps (the allocation's id is named)."""
    if not allocation:
        return False
    try:
        return any(job == int(allocation) for job, _ in parse(args, env).ids)
    except Refused:
        return False


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
    if needs_steps(args, allocation, os.environ):
        try:
            done = subprocess.run(  # noqa: S603 - an argument list
                [shutil.which("scontrol") or "scontrol", "-o", "show", "step", allocation],
                capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"slurm_fsm: scancel: could not list the steps of {allocation}: {exc}; "
                  "nothing cancelled", file=sys.stderr)
            return 1
        steps = own_steps(done.stdout, allocation, socket.gethostname(), os.getpgrp())
    p = plan(args, allocation, steps, os.environ)
    if p.message:
        print(p.message, file=sys.stderr)
    if p.argv is None:
        return p.status
    # in a persistent run the variables were read into p.argv: the real scancel gets
    # none of them (it would read them again, unchecked)
    env = {k: v for k, v in os.environ.items()
           if not allocation or (k not in ENV_OPTIONS and not k.startswith("SCANCEL_"))}
    try:
        return subprocess.run([real, *p.argv], timeout=TIMEOUT_S,  # noqa: S603
                              env=env, check=False).returncode
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


def submit_shim_text(tool: str) -> str:
    """The ``salloc`` or ``sbatch`` file (see the module docstring): unsets what
    :data:`SCRIPT_VARS_ENV` names, takes its own directory off ``PATH`` and runs the
    real ``tool``."""
    if tool not in SUBMIT_TOOLS:
        raise ValueError(f"not a tool that submits a job: {tool!r}")
    return (
        f"#!/bin/sh\n# slurm_fsm: {tool} for a persistent run's script (see "
        "slurm_fsm.scancelshim): the job it submits gets none of the run's placement\n"
        "set -f\n"
        f"for v in ${SCRIPT_VARS_ENV}; do\n"
        "  case $v in ''|*[!A-Za-z0-9_]*) ;; *) unset \"$v\" ;; esac\n"
        "done\n"
        f"unset {SCRIPT_VARS_ENV} {ALLOCATION_ENV}\n"
        "here=${0%/*}\np=\nIFS=:\n"
        'for d in $PATH; do [ "$d" = "$here" ] || p=${p:+$p:}$d; done\n'
        "unset IFS\nPATH=$p\nexport PATH\n"
        f'exec {tool} "$@"\n'
    )


def _shim_files() -> dict[str, str]:
    return {"scancel": shim_text(), **{t: submit_shim_text(t) for t in SUBMIT_TOOLS}}


def shim_dir(base: Path | None = None) -> Path:
    """A directory of this user's alone holding the ``scancel``, ``salloc`` and
    ``sbatch`` shims (made once per interpreter and slurm_fsm install; the same path for
    every run): ``slurm_fsm-<uid>`` under ``base`` (``$XDG_RUNTIME_DIR``, else the temp
    folder). When that name is taken by something not private (another user made it
    first, a link, a file: issue 43 item 6), a fresh ``mkdtemp`` folder there instead,
    one per process. OSError when neither can be made: the caller refuses the run."""
    files = _shim_files()
    digest = hashlib.sha256("\0".join(files.values()).encode()).hexdigest()[:16]
    root = base or Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    try:
        top = _private_dir(root / f"slurm_fsm-{os.getuid()}")
    except OSError as taken:
        top = _fresh_private_dir(root, taken)
    where = _private_dir(top / f"shim-{digest}")
    for name, text in files.items():
        _write_shim(where / name, text)
    return where


#: the fresh private folders made by :func:`_fresh_private_dir`, by root
_FRESH: dict[Path, Path] = {}


def _fresh_private_dir(root: Path, taken: OSError) -> Path:
    """A ``mkdtemp`` folder under ``root`` (made 0700 under a name nobody can guess
    or make first), kept for this process's later runs while it stays private."""
    known = _FRESH.get(root)
    if known is not None:
        with contextlib.suppress(OSError):
            return _private_dir(known)
    try:
        made = Path(tempfile.mkdtemp(prefix=f"slurm_fsm-{os.getuid()}-", dir=root))
    except OSError as exc:
        raise OSError(f"{taken}; and no folder of its own can be made in {root}: "
                      f"{exc.strerror or exc}") from exc
    _FRESH[root] = _private_dir(made)
    return made


def _write_shim(target: Path, text: str) -> None:
    try:
        if target.read_text(encoding="utf-8") == text:
            return
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def shim_env(path: str) -> dict[str, str]:
    """The variables that put the shims first on a script's ``PATH`` (``path``: the
    PATH it would have otherwise). OSError when no private folder can hold them: the
    script is not run without its shims (an exported bash function, the old stand-in,
    is dropped by ``/bin/sh`` and ``env``: issue 43 item 6)."""
    try:
        where = shim_dir()
    except OSError as exc:
        raise OSError(f"no private folder for the scancel shim ({exc}): a persistent "
                      "run's script is not started without it") from exc
    return {"PATH": f"{where}{os.pathsep}{path}"}


if __name__ == "__main__":
    sys.exit(main())
