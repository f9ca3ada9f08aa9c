"""Generated documentation of the machine: ``docs/states.md``.

The machine itself knows no command line; this page says which Slurm commands
the work of each state issues through the real backend, next to the edges.
"""

from __future__ import annotations

from slurm_fsm.machine import EDGES, Edge, State, mermaid_diagram

__all__ = ["WORK_COMMANDS", "states_markdown"]

#: The Slurm commands the work of each trigger/state issues (backend calls).
WORK_COMMANDS: dict[str, str] = {
    "start": "none (reads the state file)",
    "release": "`squeue -j ID` (owner check), `scancel ID`",
    "Validating": "`squeue -j ID -h -o ...` (one query)",
    "Expiring": "`scancel ID`",
    "Incompatible": "`scancel ID`",
    "Allocating": "`srun --help` (only with an image), `squeue -u USER --name=NAME`, "
                  "`scancel` per orphan, `salloc --no-shell ...`, `squeue -j ID` until RUNNING",
    "Importing": "`srun --jobid=ID -N n --ntasks-per-node=1 --container-image=IMG "
                 "--container-name=NAME true`, `srun ... ls <mount>` per mount, "
                 "`srun ... nvidia-smi --query-compute-apps=...`",
    "Installing": "`srun ... --container-writable pip install -e .`, "
                  "`pip install -r requirements-dev.txt` (+ eval requirements)",
    "run": "`srun ... nvidia-smi` (GPU pre-flight); time left reuses the validation's answer",
    "finish": "none (the monitor cancelled a hung step with `scancel ID.STEP`; after a "
              "failed step, `squeue -j ID` and `sacct` tell whether the allocation ended "
              "under it)",
    "fail": "none",
}


def _commands_of(edge: Edge) -> str:
    if edge.trigger == "advance" and isinstance(edge.source, State):
        return WORK_COMMANDS.get(edge.source.value, "-")
    return WORK_COMMANDS.get(edge.trigger, "-")


def states_markdown() -> str:
    """``docs/states.md``: the diagram and the edge table, generated from :data:`EDGES`."""
    rows = [
        "# States and edges",
        "",
        "Generated from `slurm_fsm.machine.EDGES` by `make diagram`; a test fails when this",
        "page is stale. Edges are tried top to bottom; the first whose conditions hold wins.",
        "",
        "```mermaid",
        mermaid_diagram(EDGES).rstrip("\n"),
        "```",
        "",
        "| trigger | from | condition | to | step | what happens | Slurm commands |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in EDGES:
        src = "any" if e.source == "*" else e.source.value if isinstance(e.source, State) else ""
        conds = [*e.conditions, *(f"not {u}" for u in e.unless)]
        rows.append(f"| `{e.trigger}` | {src} | {' and '.join(conds) or '-'} | {e.dest.value} "
                    f"| {e.step or '-'} | {e.doc} | {_commands_of(e)} |")
    return "\n".join(rows) + "\n"
