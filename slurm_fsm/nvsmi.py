"""What ``nvidia-smi`` prints on a node, and what it means when it fails.

nvidia-smi can fail on a node that has it: ``NVIDIA-SMI has failed because it couldn't
communicate with the NVIDIA driver...`` (exit 9), ``No devices were found`` (exit 6).
Its words are then no GPU name and no process row. The node scripts here print a marker
with nvidia-smi's exit status after its output, so that the parsers tell rows from a
failure:

* the GPU probe (pre-step) asks ``--query-gpu=name,compute_cap`` (falls back to
  ``name`` on a driver too old for ``compute_cap``); a failure is an error naming the
  node and nvidia-smi's text (:class:`NvidiaSmiFailed`);
* the pre-flight's process listing (``--query-compute-apps``) reports each node whose
  nvidia-smi failed as a warning with its text (:func:`parse_gpu_processes`).

A probed name carries its compute capability as ``NVIDIA GH200 480GB (sm_90)``;
:func:`arch_of_compute_cap` turns it into a build arch when the name is not in the table.
"""

from __future__ import annotations

import re
import shlex

import attrs

from slurm_fsm.backend import GpuProcess
from slurm_fsm.errors import NvidiaSmiFailed

__all__ = [
    "EXIT_MARKER",
    "NODE_MARKER",
    "NvidiaSmiFailed",
    "NvidiaSmiFailure",
    "arch_of_compute_cap",
    "gpu_processes_script",
    "parse_gpu_probe",
    "parse_gpu_processes",
    "probe_script",
]

#: The line each node prints before its nvidia-smi output.
NODE_MARKER = "@@slurm_fsm-node"
#: The line printed after nvidia-smi: its exit status.
EXIT_MARKER = "@@slurm_fsm-nvidia-smi-exit"
#: The line each node prints, in :func:`gpu_processes_script`, with the pids of the
#: allocation's own processes there (``scontrol listpids``): its jobs are not intruders.
OURS_MARKER = "@@slurm_fsm-ours"

PROCESS_QUERY = ("nvidia-smi", "--query-compute-apps=pid,name,used_memory",
                 "--format=csv,noheader")
NAME_CAP_QUERY = ("nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader")
NAME_QUERY = ("nvidia-smi", "--query-gpu=name", "--format=csv,noheader")

_NODE = f'echo "{NODE_MARKER} ${{SLURMD_NODENAME:-$(hostname)}}"; '


@attrs.frozen(kw_only=True)
class NvidiaSmiFailure:
    """nvidia-smi exited non-zero on ``node``; ``text`` is what it printed."""

    node: str
    exit_code: int
    text: str

    def describe(self) -> str:
        return (f"nvidia-smi failed on {self.node} (exit {self.exit_code}): "
                f"{self.text or 'no output'}")


def gpu_processes_script() -> str:
    """The ``bash -c`` text run once per node: the node's name, nvidia-smi's compute
    processes (stderr too) and its exit status, when nvidia-smi exists."""
    query = shlex.join(PROCESS_QUERY)
    return (f"{_NODE}if command -v nvidia-smi >/dev/null 2>&1; then {query} 2>&1; "
            f'echo "{EXIT_MARKER} $?"; '
            # the allocation's own processes on this node (its other jobs' steps)
            f'echo "{OURS_MARKER} $(scontrol listpids "$SLURM_JOB_ID" '
            '"${SLURMD_NODENAME:-$(hostname)}" 2>/dev/null '
            "| awk 'NR > 1 && $1 ~ /^[0-9]+$/ {printf \"%s \", $1}')\"; fi")


def probe_script() -> str:
    """The ``bash -c`` text of the GPU probe: ``name, compute_cap`` rows (``name`` only
    when this nvidia-smi does not know ``compute_cap``) and the exit status."""
    cap, name = shlex.join(NAME_CAP_QUERY), shlex.join(NAME_QUERY)
    return (f"{_NODE}if command -v nvidia-smi >/dev/null 2>&1; then "
            f"out=$({cap} 2>&1); rc=$?; "
            f'if [ $rc -ne 0 ] && printf "%s" "$out" | grep -q "compute_cap"; then '
            f"out=$({name} 2>&1); rc=$?; fi; "
            f'printf "%s\\n" "$out"; echo "{EXIT_MARKER} $rc"; fi')


_LABELLED = re.compile(r"^\s*(\d+):\s?(.*)$")


def _by_node(text: str, labelled: bool,
             ours: dict[str, set[int]] | None = None,
             ) -> dict[str, tuple[str, list[str], int | None]]:
    """task -> (node, lines, exit status) from the scripts' output; ``ours`` (when
    given) gets node -> the pids its ``@@slurm_fsm-ours`` line names."""
    out: dict[str, tuple[str, list[str], int | None]] = {}
    for line in text.splitlines():
        task, body = "0", line.rstrip()
        if labelled:
            m = _LABELLED.match(line)
            if not m:
                continue
            task, body = m.group(1), m.group(2).rstrip()
        node, lines, code = out.get(task, (f"task{task}", [], None))
        if body.startswith(NODE_MARKER):
            node = body[len(NODE_MARKER):].strip() or node
        elif body.startswith(EXIT_MARKER):
            word = body[len(EXIT_MARKER):].strip()
            code = int(word) if word.isdigit() else code
        elif body.startswith(OURS_MARKER):
            if ours is not None:
                ours.setdefault(node, set()).update(
                    int(w) for w in body[len(OURS_MARKER):].split() if w.isdigit())
        elif body.strip():
            lines.append(body.strip())
        out[task] = (node, lines, code)
    return out


def _process_row(node: str, body: str) -> GpuProcess | None:
    pid, _, rest = body.partition(",")
    name, _, memory = rest.rpartition(",")
    if not pid.strip().isdigit() or not name.strip():
        return None
    return GpuProcess(node=node, pid=int(pid), name=name.strip(), used_memory=memory.strip())


def parse_gpu_processes(text: str) -> tuple[list[GpuProcess], list[NvidiaSmiFailure]]:
    """Output of :func:`gpu_processes_script` run with ``srun -l`` on each node ->
    (compute processes, nodes whose nvidia-smi failed with its text). The processes
    a node's ``@@slurm_fsm-ours`` line names are the allocation's own (a sibling job's
    step) and are left out."""
    procs: list[GpuProcess] = []
    failures: list[NvidiaSmiFailure] = []
    ours: dict[str, set[int]] = {}
    for node, lines, code in _by_node(text, labelled=True, ours=ours).values():
        if code:
            failures.append(NvidiaSmiFailure(node=node, exit_code=code,
                                             text=" ".join(lines)[:500]))
            continue
        procs += [p for p in (_process_row(node, body) for body in lines)
                  if p is not None and p.pid not in ours.get(node, ())]
    return procs, failures


def parse_gpu_probe(text: str) -> str | None:
    """Output of :func:`probe_script` -> ``NVIDIA GH200 480GB (sm_90)`` (the first GPU;
    without the ``(sm_..)`` when nvidia-smi gave no compute capability); None when the
    node has no nvidia-smi. :class:`NvidiaSmiFailed` when nvidia-smi failed."""
    for node, lines, code in _by_node(text, labelled=False).values():
        if code:
            raise NvidiaSmiFailed([NvidiaSmiFailure(node=node, exit_code=code,
                                                    text=" ".join(lines)[:500])])
        for line in lines:
            name, _, cap = line.rpartition(",")
            if not name:
                name, cap = cap, ""
            cap = cap.strip()
            if re.fullmatch(r"\d+\.\d+", cap):
                major, minor = cap.split(".")
                return f"{name.strip()} (sm_{major}{minor})"
            return line.strip() or None
    return None


_SM = re.compile(r"\bsm_?(\d{2,3})\b", re.I)


def arch_of_compute_cap(gpu_name: str) -> str | None:
    """``NVIDIA GH200 480GB (sm_90)`` -> ``90-real``; None when the name carries no
    compute capability."""
    m = _SM.search(gpu_name)
    return f"{m.group(1)}-real" if m else None
