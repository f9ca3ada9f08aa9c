"""Emulated GPUs for the local Slurm cluster: Slurm schedules them for real.

Each node gets :data:`GPUS_PER_NODE` GPUs that Slurm knows as ``gres/gpu``:
``gres.conf`` (``AutoDetect=off``) names one character device per GPU,
``<base>/dev/<node>/nvidia<i>``, each with a number of its own
(``c 195:<minor>``, :func:`device_number`: no driver answers it, so opening one
fails with ENXIO; the devices cgroup works by major:minor, so they must differ
from each other and from ``/dev/null``'s ``1:3``); Slurm reads the GPU's index from
the digits of the file name, hands each step its own GPUs and sets
``CUDA_VISIBLE_DEVICES`` for it (``task/none`` does not remap: the indices are the
node's; ``task/cgroup`` renumbers from 0 and, with ``ConstrainDevices=yes``, denies
the step every other GPU's device file: EPERM).

An ``nvidia-smi`` stand-in (:data:`NVIDIA_SMI_NAME` in ``<base>/gpu-bin``) is on every
task's ``PATH`` because srun carries the caller's ``PATH`` to its tasks and the
cluster's client environment (``ClusterInfo.env``, the ``up``/``env`` export line)
puts the folder first (a ``TaskProlog`` cannot: pyxis runs it inside the container,
where its file is not). It answers the queries
slurm_fsm makes, in the formats the real one prints (see
``real-material/slurm/nvidia_smi_fixtures.txt``), for the GPUs its process may
open, as the real one does: under device confinement, those whose device file
does not answer EPERM; without it (every file opens), the GPUs of
``CUDA_VISIBLE_DEVICES`` (all of the node's when unset), which is how ``task/none``
shows a step its share:

- ``--query-gpu=FIELDS --format=csv,noheader`` (``index``, ``name``,
  ``compute_cap``, ``uuid``, ``memory.total``),
- ``--query-compute-apps=FIELDS --format=csv,noheader`` (``pid``, ``name`` or
  ``process_name``, ``used_memory``, ``gpu_uuid``): the processes a test put on
  a GPU with :func:`put_process`,
- ``-L``.

A test makes nvidia-smi fail on a node with :func:`set_failure` and changes the
GPU model with :func:`set_model`; :func:`reset` undoes all of it.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "DEFAULT_MODEL",
    "DEVICE_MAJOR",
    "GPUS_PER_NODE",
    "NVIDIA_SMI_NAME",
    "bin_dir",
    "device_number",
    "gpu_dir",
    "gres_conf",
    "gres_node_field",
    "path_with_stand_in",
    "prepare",
    "put_process",
    "reset",
    "set_failure",
    "set_model",
]

GPUS_PER_NODE = 4
#: the major number of the emulated GPUs' device files (NVIDIA's; no driver here)
DEVICE_MAJOR = 195
NVIDIA_SMI_NAME = "nvidia-smi"
#: (name as nvidia-smi prints it, compute capability)
DEFAULT_MODEL = ("NVIDIA H100 80GB HBM3", "9.0")
_MEMORY_TOTAL = "81559 MiB"


def gpu_dir(base: Path) -> Path:
    """Where the stand-in reads what a test put on the GPUs (``<node>/<i>.procs``)."""
    return base / "gpu"


def bin_dir(base: Path) -> Path:
    return base / "gpu-bin"


def path_with_stand_in(base: Path, path: str) -> str:
    """``path`` (a ``PATH`` value) with the stand-in's folder first, once."""
    first = str(bin_dir(base))
    rest = [p for p in path.split(os.pathsep) if p and p != first]
    return os.pathsep.join([first, *rest])


def _dev_dir(base: Path, node: str) -> Path:
    return base / "dev" / node


def device_number(node_index: int, gpu: int) -> tuple[int, int]:
    """(major, minor) of GPU ``gpu`` of the ``node_index``-th node (from 0): distinct
    for every GPU of every node."""
    if not 0 <= gpu < 16 or not 0 <= node_index < 15:
        raise ValueError(f"node {node_index}, GPU {gpu}: at most 15 nodes of 16 GPUs")
    return DEVICE_MAJOR, node_index * 16 + gpu


def gres_node_field(gpus: int = GPUS_PER_NODE, gpu_type: str | None = None) -> str:
    """The ``Gres=`` field of a node line (``gpu:4``, typed ``gpu:h100:4``)."""
    return f"Gres=gpu:{gpu_type}:{gpus}" if gpu_type else f"Gres=gpu:{gpus}"


def gres_conf(base: Path, nodes: Sequence[str], gpus: int = GPUS_PER_NODE,
              gpu_type: str | None = None) -> str:
    lines = ["# written by slurm_fsm_dev.localgpu; regenerated on every `up`", "AutoDetect=off"]
    typed = f" Type={gpu_type}" if gpu_type else ""
    for node in nodes:
        files = f"{_dev_dir(base, node)}/nvidia[0-{gpus - 1}]" if gpus > 1 else \
            f"{_dev_dir(base, node)}/nvidia0"
        lines.append(f"NodeName={node} Name=gpu{typed} File={files}")
    return "\n".join(lines) + "\n"


def _stand_in(base: Path, gpus: int) -> str:
    """The nvidia-smi stand-in (bash; no Python needed on the node)."""
    g = shlex.quote(str(gpu_dir(base)))
    name, cap = DEFAULT_MODEL
    return f"""#!/bin/bash
# nvidia-smi stand-in of the local Slurm cluster (slurm_fsm_dev.localgpu)
G={g}
node="${{SLURMD_NODENAME:-$(hostname)}}"
ngpus={gpus}
name={shlex.quote(name)}; cap={shlex.quote(cap)}
if [ -r "$G/model" ]; then IFS='|' read -r name cap < "$G/model"; fi
if [ -r "$G/$node/fail" ]; then
  cat "$G/$node/fail"; rc=9; [ -r "$G/$node/fail.rc" ] && read -r rc < "$G/$node/fail.rc"
  exit "$rc"
fi
# the GPUs this process may open: the devices cgroup answers EPERM for the others
D={shlex.quote(str(base / "dev"))}/"$node"
openable=(); denied=0
for ((i = 0; i < ngpus; i++)); do
  err=$( {{ exec 3<"$D/nvidia$i"; }} 2>&1 )
  case "$err" in *"not permitted"*) denied=1 ;; *) openable+=("$i") ;; esac
done
if [ "$denied" = 0 ] && [ "${{CUDA_VISIBLE_DEVICES+set}}" = set ]; then
  # no confinement (task/none): the step's share is what CUDA_VISIBLE_DEVICES names
  IFS=',' read -r -a visible <<< "$CUDA_VISIBLE_DEVICES"
else
  visible=("${{openable[@]}}")
fi
ok=()
for i in "${{visible[@]}}"; do
  [[ "$i" =~ ^[0-9]+$ ]] && (( i < ngpus )) && ok+=("$i")
done
if [ ${{#ok[@]}} -eq 0 ]; then echo "No devices were found"; exit 6; fi
uuid() {{ printf 'GPU-%08x-0000-4000-8000-%012d' "$(cksum <<< "$node" | cut -d' ' -f1)" "$1"; }}
query=""; apps=""
for a in "$@"; do
  case "$a" in
    --query-gpu=*) query="${{a#*=}}" ;;
    --query-compute-apps=*) apps="${{a#*=}}" ;;
    -L|--list-gpus)
      for i in "${{ok[@]}}"; do echo "GPU $i: $name (UUID: $(uuid "$i"))"; done; exit 0 ;;
  esac
done
if [ -n "$query" ]; then
  IFS=',' read -r -a fields <<< "$query"
  for i in "${{ok[@]}}"; do
    row=()
    for f in "${{fields[@]}}"; do
      case "$f" in
        index) row+=("$i") ;;
        name|gpu_name) row+=("$name") ;;
        compute_cap) row+=("$cap") ;;
        uuid|gpu_uuid) row+=("$(uuid "$i")") ;;
        memory.total) row+=({shlex.quote(_MEMORY_TOTAL)}) ;;
        *) echo "Field \\"$f\\" is not a valid field to query."; exit 2 ;;
      esac
    done
    (IFS=','; echo "${{row[*]}}") | sed 's/,/, /g'
  done
  exit 0
fi
if [ -n "$apps" ]; then
  IFS=',' read -r -a fields <<< "$apps"
  for i in "${{ok[@]}}"; do
    f_="$G/$node/$i.procs"; [ -r "$f_" ] || continue
    while IFS='|' read -r pid pname mem; do
      [ -n "$pid" ] || continue
      row=()
      for f in "${{fields[@]}}"; do
        case "$f" in
          pid) row+=("$pid") ;;
          name|process_name) row+=("$pname") ;;
          used_memory|used_gpu_memory) row+=("$mem") ;;
          gpu_uuid) row+=("$(uuid "$i")") ;;
          *) echo "Field \\"$f\\" is not a valid field to query."; exit 2 ;;
        esac
      done
      out=""; for v in "${{row[@]}}"; do out="${{out:+$out, }}$v"; done; echo "$out"
    done < "$f_"
  done
  exit 0
fi
for i in "${{ok[@]}}"; do echo "GPU $i: $name (UUID: $(uuid "$i"))"; done
"""


def prepare(base: Path, nodes: Sequence[str], gpus: int = GPUS_PER_NODE,
            gpu_type: str | None = None) -> str:
    """Make the device files (:func:`device_number`) and the stand-in; return
    gres.conf's text.

    Needs root for ``mknod`` (the local cluster runs as root); an OSError says why not.
    """
    for n, node in enumerate(nodes):
        d = _dev_dir(base, node)
        d.mkdir(parents=True, exist_ok=True)
        (gpu_dir(base) / node).mkdir(parents=True, exist_ok=True)
        for i in range(gpus):
            dev = d / f"nvidia{i}"
            dev.unlink(missing_ok=True)
            os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(*device_number(n, i)))
    bd = bin_dir(base)
    bd.mkdir(parents=True, exist_ok=True)
    smi = bd / NVIDIA_SMI_NAME
    smi.write_text(_stand_in(base, gpus))
    smi.chmod(0o755)
    return gres_conf(base, nodes, gpus, gpu_type)


def put_process(base: Path, node: str, gpu: int, pid: int, name: str,
                used_memory: str = "1024 MiB") -> None:
    """List a compute process on ``node``'s GPU ``gpu`` (nvidia-smi shows it until reset)."""
    if "|" in name or "\n" in name:
        raise ValueError(f"process name {name!r}: no '|' or newline")
    path = gpu_dir(base) / node / f"{gpu}.procs"
    with path.open("a") as fh:
        fh.write(f"{pid}|{name}|{used_memory}\n")


def set_failure(base: Path, node: str, text: str, exit_code: int = 9) -> None:
    """Make nvidia-smi on ``node`` print ``text`` and exit ``exit_code``."""
    d = gpu_dir(base) / node
    (d / "fail").write_text(text + "\n")
    (d / "fail.rc").write_text(f"{exit_code}\n")


def set_model(base: Path, name: str, compute_cap: str) -> None:
    """The GPU model every node reports (``--query-gpu=name,compute_cap``)."""
    (gpu_dir(base) / "model").write_text(f"{name}|{compute_cap}\n")


def reset(base: Path) -> None:
    """Forget every process, failure and model a test set."""
    g = gpu_dir(base)
    if not g.is_dir():
        return
    (g / "model").unlink(missing_ok=True)
    for node_dir in g.iterdir():
        if node_dir.is_dir():
            for f in node_dir.iterdir():
                if f.name.endswith(".procs") or f.name in ("fail", "fail.rc"):
                    f.unlink(missing_ok=True)
