"""What the job's own script says, checked against the spec before Slurm is asked.

The persistent path imports and installs into the pyxis container named by the spec's
``container_name``; the script's own ``srun --container-name=...`` must name the same
container (procedure.md: "must match exactly"), or pyxis makes a fresh container of
the other name and the import and installs are silently lost.
:func:`container_name_problems` reads the script (bounded, a regular file only) and
names both when they differ.

What is read: every ``--container-name=V`` / ``--container-name V`` outside comments,
and on ``#SBATCH`` lines (pyxis takes it there too). ``V`` may be quoted; pyxis' flag
suffix (``name:exec``, ``:create``, ``:no_create``, ``:auto``) is not part of the name.
A ``$VAR`` / ``${VAR}`` value is resolved from the script's own plain assignments
(``VAR=value``, ``export VAR=value``) when they give it exactly one value; otherwise it
is set at run time and is not judged (no false alarm).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from slurm_fsm.files import FileProblem, read_bounded
from slurm_fsm.spec import JobSpec, script_problems

__all__ = ["MAX_SCRIPT_BYTES", "batch_job_problems", "batch_placement",
           "container_name_problems", "input_problems", "line_ending_problems",
           "read_script_text",
           "script_container_names"]

#: A job script is a few kilobytes; a larger one is not read for this check.
MAX_SCRIPT_BYTES = 1 << 20

_OPTION = re.compile(r"--container-name(?:=|\s+)(\"[^\"]*\"|'[^']*'|[^\s;&|)]+)")
_ASSIGN = re.compile(r"^\s*(?:export\s+|declare\s+(?:-x\s+)?|readonly\s+)?"
                     r"([A-Za-z_][A-Za-z0-9_]*)=(\S*)")
_VAR = re.compile(r"^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))$")
_PYXIS_FLAGS = ("auto", "create", "exec", "no_create")


def _unquote(text: str) -> str:
    try:
        parts = shlex.split(text)
    except ValueError:
        return text.strip("'\"")
    return parts[0] if len(parts) == 1 else text


def _strip_flag(name: str) -> str:
    base, sep, flag = name.rpartition(":")
    return base if sep and flag in _PYXIS_FLAGS else name


def script_container_names(text: str) -> list[tuple[int, str]]:
    """``(line number, name)`` of each ``--container-name`` of the script, variables
    resolved where the script itself gives them one value; a name still holding a
    ``$`` is set at run time."""
    assigned: dict[str, set[str]] = {}
    for line in text.splitlines():
        m = _ASSIGN.match(line)
        if m:
            assigned.setdefault(m.group(1), set()).add(_unquote(m.group(2)))
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.lstrip()
        if stripped.startswith("#") and not stripped.startswith("#SBATCH"):
            continue
        code = stripped if stripped.startswith("#SBATCH") else line.split(" #", 1)[0]
        for m in _OPTION.finditer(code):
            value = _unquote(m.group(1))
            var = _VAR.match(value)
            if var:
                name = var.group(1) or var.group(3)
                values = assigned.get(name, set())
                if len(values) == 1 and "$" not in next(iter(values)):
                    value = next(iter(values))
                elif not values and var.group(2):
                    value = var.group(2)  # ${X:-default} with X never set in the script
            found.append((number, _strip_flag(value)))
    return found


def container_name_problems(spec: JobSpec) -> list[str]:
    """``script_path: ...`` lines when the script's ``--container-name`` is not the
    spec's ``container_name`` (persistent mode with a container only). A script that
    cannot be read, or names no container, or names it at run time, is not judged
    here."""
    want = spec.container_name
    if not spec.persistent_mode or spec.docker_image is None or want is None:
        return []
    try:
        raw = read_bounded(spec.script_path, MAX_SCRIPT_BYTES)
    except FileProblem:
        return []  # missing: script_problems says so; unreadable: the run will say
    text = raw.decode("utf-8", "replace")
    out = []
    for number, name in script_container_names(text):
        if "$" in name or name == want:
            continue
        out.append(f"script_path: line {number} of {spec.script_path} says "
                   f"--container-name={name}, but container_name is {want!r}: they must "
                   "match exactly, or the job runs in another container than the one "
                   "imported and installed into")
    return out


def batch_placement(spec: JobSpec) -> tuple[str | None, str | None, list[str]]:
    """The ``--partition`` and ``--account`` the one-shot ``sbatch`` passes, and warnings.

    The script's own ``#SBATCH --partition`` / ``--account`` (``-p`` / ``-A``) win:
    for each the script sets, nothing is passed on the command line (where it would
    override the script's line without a word), and a warning says so when it differs
    from ``slurm_params``. Where the script sets none, the spec's is passed."""
    from slurm_fsm.slurmcli import sbatch_directives

    p = spec.slurm_params
    try:
        text = read_bounded(spec.script_path, MAX_SCRIPT_BYTES).decode("utf-8", "replace")
    except FileProblem:
        return p.partition, p.account, []
    own = sbatch_directives(text)
    warnings = []
    chosen: list[str | None] = []
    for key, wanted in (("partition", p.partition), ("account", p.account)):
        mine = own.get(key)
        if not mine:
            chosen.append(wanted)
            continue
        chosen.append(None)
        if mine != wanted:
            warnings.append(f"the script's own #SBATCH --{key}={mine} is used, not "
                            f"slurm_params.{key} {wanted!r} (a script's #SBATCH lines win "
                            "in one-shot mode)")
    return chosen[0], chosen[1], warnings


def read_script_text(path: Path) -> str:
    """The job script's text (its first :data:`MAX_SCRIPT_BYTES`, bytes that are not
    UTF-8 replaced); "" when it cannot be read."""
    try:
        return read_bounded(path, MAX_SCRIPT_BYTES).decode("utf-8", "replace")
    except FileProblem:
        return ""


#: What persistent mode says of a script that makes an array or heterogeneous job.
_NOT_PERSISTENT = {
    "array": "its #SBATCH --array makes an array job, one job per task, and only sbatch "
             "makes one",
    "het": "its #SBATCH hetjob makes a heterogeneous job of several components, and only "
           "sbatch makes one",
}


def batch_job_problems(spec: JobSpec) -> list[str]:
    """A persistent run of a script that makes an array or heterogeneous job: refused.
    Persistent mode runs the script once with ``bash`` inside the allocation, where
    ``#SBATCH`` lines are comments: there would be one run, not the tasks (or
    components) the script asks for, and a report of that one as the whole. One-shot
    mode (``sbatch``) runs them and judges every task (docs/report.md)."""
    if not spec.persistent_mode:
        return []
    from slurm_fsm.slurmcli import batch_kind

    kind = batch_kind(read_script_text(spec.script_path))
    if not kind:
        return []
    return [f"script_path: {spec.script_path}: {_NOT_PERSISTENT[kind]}; persistent mode "
            "runs the script once with bash inside the allocation, where #SBATCH lines "
            "are comments. Set persistent_mode: false to run it with sbatch (every "
            "task or component is judged), or remove the line"]


def line_ending_problems(spec: JobSpec) -> list[str]:
    """A script with Windows line endings (CRLF): refused in both modes, before Slurm.
    ``sbatch`` refuses it itself ("Batch script contains DOS line breaks"), while
    ``bash`` in persistent mode would run every line with a ``\r`` at its end: the same
    spec must meet the same answer in both."""
    if "\r\n" not in read_script_text(spec.script_path):
        return []
    return [f"script_path: {spec.script_path} has Windows line endings (CRLF): sbatch "
            "refuses such a script and bash sees a carriage return at the end of every "
            f"line; convert it (`dos2unix {spec.script_path}`, or `sed -i 's/\\r$//'`)"]


def input_problems(spec: JobSpec) -> list[str]:
    """The job script, checked before any Slurm command: it is a file
    (:func:`slurm_fsm.spec.script_problems`), its own ``--container-name`` is the
    spec's (:func:`container_name_problems`), it makes no array or heterogeneous
    job in persistent mode (:func:`batch_job_problems`), and its lines end as Unix's
    (:func:`line_ending_problems`). The CLI's ``run`` and the executor ask this one
    function."""
    problems = script_problems(spec.script_path)
    if problems:
        return problems
    return (line_ending_problems(spec) + container_name_problems(spec)
            + batch_job_problems(spec))
