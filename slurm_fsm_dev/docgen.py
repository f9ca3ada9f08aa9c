"""Generated documentation of the machine: ``docs/states.md`` and its diagram.

The machine itself knows no command line; this page says which Slurm commands
the work of each state issues through the real backend, next to the edges.

The page keeps a mermaid block (a code host draws it); the docs site draws the
same edges with Graphviz instead (:func:`states_svg`, called by the site's build
hook), so that the picture needs no script and no network to show.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence

from slurm_fsm.jobstate import JobState
from slurm_fsm.step0.table import (
    CONDITIONS,
    EDGES,
    PART_STATES,
    DiagramPart,
    Edge,
    Effect,
    State,
    mermaid_diagram,
    part_edges,
    part_of_state,
)

__all__ = [
    "DIAGRAM_MARKER",
    "PUBLIC_MODULES",
    "RUN_DIAGRAM_MARKER",
    "STEP_CODES",
    "WORK_COMMANDS",
    "DiagramError",
    "diagram_marker",
    "run_svg",
    "states_dot",
    "states_markdown",
    "states_svg",
]

#: The modules whose ``__all__`` is public API: every name in them has an entry
#: in the API reference (docs/api/), which a test checks.
PUBLIC_MODULES: tuple[str, ...] = (
    "slurm_fsm",
    "slurm_fsm.spec",
    "slurm_fsm.duration",
    "slurm_fsm.executor",
    "slurm_fsm.detach",
    "slurm_fsm.runowner",
    "slurm_fsm.runstates",
    "slurm_fsm.supervise",
    "slurm_fsm.agent",
    "slurm_fsm.fakecli",
    "slurm_fsm.events",
    "slurm_fsm.project",
    "slurm_fsm.progress",
    "slurm_fsm.build",
    "slurm_fsm.allocation",
    "slurm_fsm.placement",
    "slurm_fsm.plan",
    "slurm_fsm.state",
    "slurm_fsm.paths",
    "slurm_fsm.capacity",
    "slurm_fsm.scriptcheck",
    "slurm_fsm.machine",
    "slurm_fsm.setupkey",
    "slurm_fsm.imagecache",
    "slurm_fsm.pyxissite",
    "slurm_fsm.edges",
    "slurm_fsm.step0.table",
    "slurm_fsm.step0.outcome",
    "slurm_fsm.step0.context",
    "slurm_fsm.history",
    "slurm_fsm.backend",
    "slurm_fsm.subprocess_backend",
    "slurm_fsm.clock",
    "slurm_fsm.report",
    "slurm_fsm.results",
    "slurm_fsm.workflows",
    "slurm_fsm.jobstate",
    "slurm_fsm.joboutput",
    "slurm_fsm.nvsmi",
    "slurm_fsm.testing",
    "slurm_fsm.errors",
)

#: Where ``states.md``'s mermaid block goes on the site: the build hook puts the
#: Graphviz drawing there.
DIAGRAM_MARKER = "<!-- slurm_fsm:state-diagram -->"


#: Where docs/detach.md's mermaid block (a run's own states) goes on the site.
RUN_DIAGRAM_MARKER = DIAGRAM_MARKER.replace(" -->", ":run -->")


def diagram_marker(part: DiagramPart) -> str:
    """What the docs hook puts in place of the mermaid block of ``part`` (and then
    replaces with its SVG): :data:`DIAGRAM_MARKER` naming the part."""
    return DIAGRAM_MARKER.replace(" -->", f":{part.value} -->")

#: The Slurm commands the work of each trigger/state issues (backend calls).
WORK_COMMANDS: dict[str, str] = {
    "start": "none (checks the state file can be written, then reads it)",
    "release": "`squeue -j ID` (owner check), `scancel ID`",
    "Validating": "`squeue -j ID -h -o ...` (one query; `scontrol show job -d -o ID` too "
                  "for a state file without the grant; with `warm_successor`, see "
                  "[the warm successor](allocation.md#the-warm-successor))",
    "Expiring": "`scancel ID`",
    "TooShort": "none while other runs' jobs use it (the lease gate waits, saying whose and "
                "until when), then `scancel ID`",
    "Incompatible": "`scancel ID`",
    "QueueingSuccessor": "`salloc --no-shell ... --job-name=<other name> "
                         "--dependency=singleton --time-min=...` (detached; returns while "
                         "PENDING), then the warmer is started",
    "AwaitingSuccessor": "`squeue -j SUCC` per poll (backing off, at most 10 s apart)",
    "Switching": "none (the successor's state file becomes the state file); the effect: "
                 "`scancel OLD` when no other run's job is on it",
    "Allocating": "`srun --help` (only with an image), `squeue -u USER` (orphans: this "
                  "checkout's tag, or untagged under the job name), `scancel` per orphan, "
                  "`salloc --no-shell ...`, `squeue -j ID` until RUNNING, "
                  "`scontrol show job -d -o ID` (what was granted)",
    "Importing": "`scontrol show config` (the plugstack config: pyxis' "
                 "container_scope), `srun ... --container-name=NAME sh -c 'read -r k < "
                 "/var/lib/slurm_fsm/setup.key ...'` (the nodes' setup keys: the same key "
                 "on every node reuses the container, nothing more; only for an image "
                 "pinned by digest or a file, when the spec installs; not under "
                 "container_scope=job), else with the image cache's entry `srun ... "
                 "--container-image=<key>.sqsh --container-name=NAME:create sh -c "
                 "'read -r k < ...'` (made from it, nothing installed), else "
                 "`srun --jobid=ID -N n --ntasks-per-node=1 bash -c '...enroot remove "
                 "-f...' pyxis_NAME pyxis_ID_NAME` (host: an old container of that name "
                 "goes), `srun ... --container-image=IMG --container-name=NAME:create true`, "
                 "`srun ... ls <mount>` per mount, "
                 "`srun ... nvidia-smi --query-compute-apps=...`",
    "Installing": "`srun ... --container-writable pip install -e .`, "
                  "`pip install -r requirements-dev.txt` (+ eval requirements), then "
                  "`sh -c '... > /var/lib/slurm_fsm/setup.key'` (the setup key), then "
                  "`srun --jobid=ID -N 1 bash -c '...enroot export...' DIR KEY pyxis_NAME "
                  "pyxis_ID_NAME` (host: the image cache's entry, once)",
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


#: The procedure's step codes (docs/states.md's "Steps"): the one place they are defined.
STEP_CODES: dict[str, str] = {
    "0A": "release (`release_allocation`): verify the owner, cancel the allocation, drop "
          "the state file",
    "0B": "one-shot (`persistent_mode=false`): no allocation; straight to `sbatch`",
    "0C": "validate the state file's allocation: reuse it, wait for it, or replace it",
    "0D": "prepare a new allocation: cancel this checkout's orphans",
    "0E": "allocate (`salloc --no-shell`), wait for RUNNING, record the grant; import the "
          "image",
    "0F": "reuse: the container is there (or import it), warm the mounts, install",
    "1": "pre-flight and start the job's script on the allocation",
    "3-5": "watch the job, collect its output, judge it (the report)",
}


def states_markdown() -> str:
    """``docs/states.md``: the diagram, the edge table, the conditions and the effects,
    generated from :data:`~slurm_fsm.step0.table.EDGES`, :data:`~slurm_fsm.step0.table.CONDITIONS`
    and :class:`~slurm_fsm.step0.table.Effect`."""
    rows = [
        "# States and edges",
        "",
        "Generated from `slurm_fsm.step0.table.EDGES` by `make diagram`; a test fails when this",
        "page is stale. A trigger first does the work of the current state, which returns",
        "one frozen `Observation`; then the edges of that trigger leaving the state are",
        "tried top to bottom, and the first whose conditions hold on the observation wins.",
        "Its effects are executed before the state changes. The effects are what an edge",
        "decides from the observation (drop a stale state file, cancel an expiring or",
        "incompatible allocation, record a failure); the work of a state does what its",
        "step of the procedure says, and that may cancel too: Allocating cancels the",
        "orphaned allocations it finds (0D), and its new allocation when it can never",
        "start or did not start in time (deleting the state file that tracked it) or",
        "cannot be recorded in the state file; `release` cancels the allocation and",
        "deletes the state file (0A). A failure of the work is recorded by the `fail`",
        "trigger.",
        "On the docs site the diagrams below are drawn by Graphviz from the same edges when",
        "the site is built (the edges of one trigger between two states share an arrow,",
        "`or` between their conditions; hover an arrow for its steps). The states of the",
        "design card come first; each opt-in part is a drawing of its own, where a dashed",
        "state is one of the first drawing (`slurm_fsm.step0.table.DiagramPart`).",
        "",
        "```mermaid",
        mermaid_diagram(EDGES, part=DiagramPart.CORE).rstrip("\n"),
        "```",
        "",
        "**Admission by time left** (an allocation too short for the job's expected",
        "duration; [below](#admission-by-time-left)):",
        "",
        "```mermaid",
        mermaid_diagram(EDGES, part=DiagramPart.ADMISSION).rstrip("\n"),
        "```",
        "",
        "**The warm successor** (`warm_successor: true` only; [below](#the-warm-successor)):",
        "",
        "```mermaid",
        mermaid_diagram(EDGES, part=DiagramPart.SUCCESSOR).rstrip("\n"),
        "```",
        "",
        "## Steps",
        "",
        "The `step` column names the step of the procedure an edge belongs to; the codes",
        "are defined here, once (the code and the docstrings use them):",
        "",
        "| step | what it is |",
        "|---|---|",
        *(f"| {code} | {what} |" for code, what in STEP_CODES.items()),
        "",
        "## Edges",
        "",
        "| trigger | from | condition | to | effects | step | what happens | Slurm commands |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in EDGES:
        src = "any" if e.source == "*" else e.source.value
        conds = [*e.conditions, *(f"not {u}" for u in e.unless)]
        effects = ", ".join(f"`{x.name}`" for x in e.effects) or "-"
        rows.append(f"| `{e.trigger}` | {src} | {' and '.join(conds) or '-'} | {e.dest.value} "
                    f"| {effects} | {e.step or '-'} | {e.doc} | {_commands_of(e)} |")
    rows += [
        "",
        "## Conditions",
        "",
        "Pure functions of the observation and the spec (`slurm_fsm.step0.table.CONDITIONS`).",
        "",
        "| condition | holds when |",
        "|---|---|",
    ]
    for name in sorted(CONDITIONS):
        rows.append(f"| `{name}` | {_CONDITION_DOCS[name]} |")
    rows += [
        "",
        "## Effects",
        "",
        "What the machine does because it takes an edge (`slurm_fsm.step0.table.Effect`).",
        "",
        "| effect | what the machine does |",
        "|---|---|",
    ]
    for effect in Effect:
        rows.append(f"| `{effect.name}` | {_EFFECT_DOCS[effect]} |")
    rows += [
        "",
        "## Admission by time left",
        "",
        "A job is started on the state file's allocation only when the time left (`%L`)",
        "covers the job's expected duration plus `EXPIRY_MARGIN_S` (5 minutes): the",
        "`job_fits` condition, judged after compatibility (an allocation that cannot hold",
        "the job is replaced anyway) and before reuse. The expected duration",
        "(`slurm_fsm.history.expected_duration`) is, first that applies: the spec's",
        "`expected_duration_seconds`; the p95 of the last 20 PASSED runs of the same spec,",
        "from `work_dirs/.slurm_fsm_history.jsonl`. The observation carries it",
        "(`expected_s`, `expected`). A time limit (`slurm_params.time_limit`,",
        "`monitor_timeout_seconds`) is an upper bound, not an estimate: without an",
        "estimate the job is admitted by the margin alone, and step 1's pre-flight warns",
        "when the time left is less than `slurm_params.time_limit` (\"The job may be",
        "killed early.\"), as the procedure does.",
        "",
        "| case | what happens |",
        "|---|---|",
        "| fits | reused (Ready), as before |",
        "| does not fit, no other run's job on the allocation | TooShort: warned, "
        "cancelled, a new allocation of `alloc_time_limit` is made; the job runs there |",
        "| does not fit, other runs' jobs on it | TooShort waits for them (the lease gate, "
        "holding the state-file lock, so no new job starts on it meanwhile), saying whose "
        "jobs and when the allocation ends at the latest (UTC); then replaces it. "
        "Past the gate's wait (or with none): Failed, nothing cancelled, the state file "
        "kept |",
        "| the spec's own figure cannot fit even a new allocation | bad input: `SpecError`, "
        "exit 2, before any Slurm command |",
        "| no estimate (no `expected_duration_seconds`, no PASSED run) | admitted by the "
        "margin alone; a `slurm_params.time_limit` longer than the time left is warned "
        "about at the pre-flight, and the job runs |",
        "| a guess from history cannot fit even a new allocation | replacing "
        "would not help: the duration counts as unknown and the job is admitted by the "
        "margin alone, as before admission |",
        "",
        "A fresh allocation is not judged again: the run that made it starts its job on",
        "it. A job expected to take nearly all of `alloc_time_limit` therefore fits only a",
        "fresh allocation, and most of its runs make a new one: give the allocation room",
        "for several jobs.",
        "",
        "## Why an allocation is replaced",
        "",
        "Every check that needs no allocation comes first: before Expiring, TooShort or",
        "Incompatible cancel anything (and before `salloc`), the pre-flight asks the",
        "cluster (`sinfo`, `sacctmgr`: questions, not changes) whether it can run the spec",
        "at all. A spec it cannot run (a misspelt partition) fails there, and the",
        "allocation of the state file is kept, warm, for the next good spec.",
        "",
        "The edge into Expiring, TooShort or Incompatible says the rule broken, in words",
        "(`Edge.why`, from `slurm_fsm.step0.table.RULES`): the transition's reason, the progress",
        "line, `slurm-fsm plan` (text and `--json` `reasons`) and the report's `notes`",
        "(`allocation 5 replaced (Incompatible: gpus_per_node 1 is more than the",
        "allocation's 0 (as granted by Slurm))`).",
        "",
        "## The warm successor",
        "",
        "With the spec's `warm_successor` (off by default: none of these edges is then",
        "taken), validation also reads the successor's state file",
        "(`work_dirs/.slurm_alloc.successor.json`) and, when it names a job, asks Slurm",
        "about it (one more `squeue`). The rules are `slurm_fsm.successor`'s:",
        "",
        "| case | what happens |",
        "|---|---|",
        "| time left <= longest job + lead time + 5 min, no successor | QueueingSuccessor: "
        "`salloc` under the other of the checkout's two names with `--dependency=singleton`, "
        "its own state file, the warmer started; then validated again |",
        "| successor ready (RUNNING, set up) | Switching: the state file names it, the job "
        "runs there; the old one is released now if no other run's job is on it, else by "
        "the last of them at its `finish` (drain) |",
        "| the job does not fit the old one (or <= 5 min left), successor coming | "
        "AwaitingSuccessor: waits (its pending reason and `squeue --start` estimate are "
        "logged), never cuts the old one |",
        "| successor running but its warmer gone (killed) | Switching, then 0F finishes its "
        "setup in this run |",
        "| successor gone, or pending for a reason that never passes | DROP_SUCCESSOR: "
        "cancelled, warned, today's path for this run |",
        "| no state file, a successor queued | `start` goes to Switching: it becomes the "
        "allocation |",
        "",
        "`slurm-fsm plan` prints what admission decides (`admission:`); `slurm-fsm status`",
        "shows the spec's expected duration against the time left.",
        "",
        "## Stepping by hand",
        "",
        "`m.possible_edges()` lists the edges out of the current state with each condition",
        "judged on the last observation (`=>` marks the one the table would take);",
        "`m.may_advance()` (and every `may_<trigger>()`) answers from the state and that",
        "observation. Neither makes a Slurm call: only a trigger does the work. Every",
        "trigger of step 0 (`start`, `advance`, `release`) takes the state-file lock,",
        "like `prepare()`; `run` and `finish` never do. The",
        "[stepping notebook](notebooks/stepping.ipynb) shows it on the fake cluster.",
    ]
    return "\n".join(rows) + "\n"


#: One line per condition for the page (a test keeps it complete).
_CONDITION_DOCS: dict[str, str] = {
    "has_state_file": "`start` read a state file naming an allocation",
    "job_gone": "Slurm does not know the job, or shows it ended or COMPLETING "
                "(or the job's caller saw the allocation end)",
    "controller_unreachable": "`squeue` could not reach the controller or timed out",
    "retries_left": "an unreachable controller is retried again (`unreachable_retries`)",
    "job_is_ours": "this user's job with this checkout's tag, or untagged under our job "
                   "name (`slurm_fsm.ownership`), and the very job the state file "
                   "recorded: when both are known, Slurm's submit time of the id is the "
                   "state file's `submit_time` (`edges.same_generation`: Slurm reuses "
                   "job ids)",
    "job_pending": "the job waits to run (`JobState.is_pending`): "
                   + ", ".join(sorted(s.value for s in JobState if s.is_pending)),
    "pending_wait_left": "a pending allocation of the state file is still waited for "
                         "(`pending_wait_s` from the first pending observation)",
    "job_running": "the job is RUNNING",
    "job_expiring": "5 minutes or less left (`EXPIRY_MARGIN_S`)",
    "job_fits": "the time left covers the job's expected duration plus `EXPIRY_MARGIN_S` "
                "(an unknown duration or an unlimited allocation always fits; see "
                "[admission](#admission-by-time-left))",
    "is_compatible": "same partition and account, same image, and the allocation as Slurm "
                     "granted it holds the job: nodes, CPUs per node for its tasks per node, "
                     "GPUs per node",
    "same_job_name": "the job carries the spec's job name",
    "same_container": "the state file names the spec's container (or no image)",
    "setup_complete": "the install finished (or there is none to do)",
    "has_image": "the spec sets `docker_image`",
    "installs": "the workflow installs the repo (not `custom` with `skip_install`)",
    "warm_successor": "the spec sets `warm_successor`",
    "successor_due": "the time left is at most the longest expected job + the lead time "
                     "(p90 of the measured queue wait, import, install + 60 s) + 5 minutes",
    "successor_queued": "the successor's state file names a job that is PENDING or RUNNING",
    "successor_usable": "the successor is RUNNING and set up (same container, installed), "
                        "or RUNNING with no warmer on it (neither its lock held nor its "
                        "recorded pid alive: it died), to be finished here (0F)",
    "old_too_short": "the job does not fit the allocation's time left (`job_fits` fails) "
                     "or 5 minutes or less are left",
    "successor_lost": "the successor is gone, PENDING for a reason that never passes, or "
                      "RUNNING with a grant that cannot hold the job (another node count, "
                      "fewer GPUs or CPUs per node)",
    "replaced": "at `finish`: the state file names another allocation than this run's",
}

_EFFECT_DOCS: dict[Effect, str] = {
    Effect.DROP_STATE_FILE: "delete the state file and forget the allocation (never "
                            "cancels it)",
    Effect.CANCEL: "`scancel` the allocation of the state file",
    Effect.RECORD_FAILURE: "record the observation's failure (the state file is kept)",
    Effect.COMPLETE_NODELIST: "write the nodelist into a state file written while PENDING",
    Effect.WARN_NOT_OURS: "warn: the state file names a job that is not ours",
    Effect.WARN_EXPIRING: "warn: the allocation expires soon",
    Effect.WARN_TOO_SHORT: "warn: the job does not fit in the allocation's time left "
                           "(its expected duration and where it came from); it is not "
                           "started on it",
    Effect.DROP_SUCCESSOR: "cancel a successor that cannot start or was granted another "
                           "shape, say why, forget its files; this run goes today's path",
    Effect.RELEASE_DRAINED: "`scancel` the allocation the successor replaced, when no "
                            "other run's job is on it (else the last of them does; if it "
                            "dies first, the next run's validation)",
}


class DiagramError(RuntimeError):
    """The state diagram could not be drawn (Graphviz missing or failing)."""


#: Fill colours of the states (translucent, so that they read on a light and a dark page).
_FILL = {State.Ready: "#4caf5055", State.Released: "#2196f344", State.Failed: "#f4433655",
         State.Running: "#ffc10755"}
_NEUTRAL_FILL = "#9e9e9e2a"


def _dot_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _and(conds: Sequence[str]) -> list[str]:
    return [c if k == 0 else f"and {c}" for k, c in enumerate(conds)]


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _arrows(part: DiagramPart, edges: Sequence[Edge]
            ) -> list[tuple[str, str, str, list[tuple[int, Edge]]]]:
    """The arrows of one drawing: the edges of ``part`` with the same trigger, source
    and destination share one arrow (its label lists each edge's conditions, ``or``
    between them), in table order."""
    arrows: dict[tuple[str, str, str], list[tuple[int, Edge]]] = {}
    for i, e in part_edges(part, edges):
        src = "__any__" if e.source == "*" else e.source.value
        arrows.setdefault((e.trigger, src, e.dest.value), []).append((i, e))
    return [(t, src, dest, items) for (t, src, dest), items in arrows.items()]


def _conds(e: Edge) -> list[str]:
    return [*e.conditions, *(f"not {u}" for u in e.unless)]


def _state_line(state: State, part: DiagramPart, current: State | None,
                loops: dict[str, list[str]]) -> str:
    fill = _FILL.get(state, _NEUTRAL_FILL)
    label = ""
    if state is current:
        fill = "#ffd54f"
        label = 'penwidth=3, color="#e65100", '
    elif part is not DiagramPart.CORE and state not in PART_STATES[part]:
        label = 'style="rounded,filled,dashed", '  # context: drawn in the core drawing
    if state.value in loops:
        rows = "<BR/>".join(_html(t) for t in loops[state.value])
        label += (f"label=<{_html(state.value)}<BR/><FONT POINT-SIZE=\"9\">{rows}</FONT>>, "
                  'margin="0.2,0.1", ')
    return (f"  {_dot_str(state.value)} [{label}id={_dot_str('state-' + state.value)}, "
            f"class=\"state\", fillcolor={_dot_str(fill)}, tooltip={_dot_str(state.value)}];")


def states_dot(edges: Sequence[Edge] = EDGES, current: State | None = None,
               part: DiagramPart | None = None) -> str:
    """One drawing of the machine in Graphviz dot (:class:`DiagramPart`; default: the
    part ``current`` is in, else the core): its states, and one arrow per trigger,
    source and destination.

    Each arrow's SVG element gets the id ``edge-<i>`` (``i`` its index in ``edges``;
    ``edge-<i>+<j>`` for edges that share it), each state's ``state-<name>``; the
    ``fail`` fan-in (source ``*``) comes from one "any state" box. The arrow's tooltip
    is each edge's step and what happens. ``current`` is drawn highlighted; a core
    state an opt-in part touches is dashed (its edges are in the core drawing).
    """
    part = part or (part_of_state(current) if current is not None else DiagramPart.CORE)
    arrows = _arrows(part, edges)
    drawn = {n for _, src, dest, _ in arrows for n in (src, dest)}
    lines = [
        "digraph slurm_fsm {",
        '  graph [rankdir=TB, bgcolor="transparent", fontname="Helvetica", nodesep=0.2,'
        " ranksep=0.35];",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=12,'
        " margin=\"0.15,0.06\"];",
        '  edge [fontname="Helvetica", fontsize=10, arrowsize=0.7];',
    ]
    if State.NoState.value in drawn:
        lines.append('  "__initial__" [shape=point, width=0.14, label="", id="state-initial",'
                     ' tooltip="start"];')
    # a self-loop's label is written in its state's box (under the name): beside a busy
    # state (Validating has a dozen arrows) Graphviz lays it over other labels
    loops: dict[str, list[str]] = {}
    for trigger, src, dest, items in arrows:
        if src == dest:
            for _, e in items:  # one line per condition: the box stays narrow
                conds = _and(_conds(e))
                rows = [f"\u21bb {trigger}" + (f" [{conds[0]}" if conds else "")]
                rows += [f"  {c}" for c in conds[1:]]
                rows[-1] += "]" if conds else ""
                loops.setdefault(dest, []).extend(rows)
    lines += [_state_line(s, part, current, loops) for s in State if s.value in drawn]
    if "__any__" in drawn:
        lines.append('  "__any__" [label="any state", shape=note, style="dashed",'
                     ' id="state-any", tooltip="any state"];')
    if State.NoState.value in drawn:
        lines.append(f'  "__initial__" -> {_dot_str(State.NoState.value)} [id="edge-initial"];')
    for trigger, src, dest, items in arrows:
        alts = [_and(_conds(e)) for _, e in items if _conds(e)]
        label = trigger + "".join(("\n[" if k == 0 else "\nor [") + "\n".join(a) + "]"
                                  for k, a in enumerate(alts))
        tip = " | ".join(f"{e.step}: {e.doc}" if e.step else e.doc for _, e in items)
        ports = 'tailport=e, headport=e, ' if src == dest else ""
        ids = "+".join(str(i) for i, _ in items)
        lines.append(f"  {_dot_str(src)} -> {_dot_str(dest)} [{ports}id=\"edge-{ids}\", "
                     f"class={_dot_str('edge-' + trigger)}, "
                     f"label={_dot_str('' if src == dest else label)}, "
                     f"tooltip={_dot_str(tip or trigger)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


_SVG_PREAMBLE = re.compile(r"\A.*?(?=<svg\b)", re.S)
_SVG_COMMENT = re.compile(r"<!--.*?-->\s*", re.S)


def states_svg(dot: str = "dot", *, timeout_s: float = 60.0,
               current: State | None = None, part: DiagramPart | None = None) -> str:
    """One drawing of the machine (:func:`states_dot`) as an SVG element to inline in a
    page (Graphviz's ``dot``): ``part``, else the part ``current`` is in, else the core.

    Raises :class:`DiagramError` when ``dot`` is missing or fails: the site is
    never built without its diagram.
    """
    name = (part or (part_of_state(current) if current else DiagramPart.CORE)).value
    return _graphviz_svg(states_dot(current=current, part=part), name, dot, timeout_s)


def run_svg(dot: str = "dot", *, timeout_s: float = 60.0) -> str:
    """A run's own states (:mod:`slurm_fsm.runstates`) as an SVG element, for
    docs/detach.md; :class:`DiagramError` as :func:`states_svg`."""
    from slurm_fsm.runstates import run_dot

    return _graphviz_svg(run_dot(), "run", dot, timeout_s)


#: where docs/architecture.md's drawing goes (scripts/docs_hooks.py)
ARCH_DIAGRAM_MARKER = "<!-- slurm_fsm:architecture -->"


def architecture_svg(dot: str = "dot", *, timeout_s: float = 60.0) -> str:
    """The package's layers (:func:`slurm_fsm_dev.archmap.architecture_dot`) as an SVG
    element, for docs/architecture.md; :class:`DiagramError` as :func:`states_svg`."""
    from slurm_fsm_dev.archmap import architecture_dot

    return _graphviz_svg(architecture_dot(), "layers", dot, timeout_s)


def _graphviz_svg(source: str, name: str, dot: str, timeout_s: float) -> str:
    exe = shutil.which(dot)
    if exe is None:
        raise DiagramError(f"Graphviz's `{dot}` was not found on PATH: install Debian's "
                           "graphviz (`make docs-deps`, or `apt-get install graphviz`)")
    try:
        proc = subprocess.run(  # noqa: S603 - an argument list, never a shell
            [exe, "-Tsvg"], input=source, capture_output=True, text=True,
            timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise DiagramError(f"`{exe} -Tsvg` did not finish in {timeout_s:g} s") from exc
    if proc.returncode != 0 or "<svg" not in proc.stdout:
        raise DiagramError(f"`{exe} -Tsvg` exited {proc.returncode}: {proc.stderr.strip()}")
    svg = _SVG_COMMENT.sub("", _SVG_PREAMBLE.sub("", proc.stdout, count=1))
    what = "the package's layers" if name == "layers" else f"state diagram: {name}"
    return svg.replace("<svg ", f'<svg role="img" aria-label="slurm_fsm {what}" ',
                       1).strip()
