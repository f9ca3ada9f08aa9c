"""A run's own states: the life of one run as its owner record tells it (issue 39).

The allocation machine (:mod:`slurm_fsm.step0.table`) says what step 0 does with an
allocation; this table says how far one run has got, for every shell that reads its
files (``slurm-fsm runs``, ``attach``, ``wait``). Its owner (the foreground process, a
detached supervisor, or the agent in the allocation) moves it by the events of
:data:`RUN_EDGES`, and only by them: :func:`next_phase` is what
:class:`slurm_fsm.runowner.OwnedRun` asks before it writes, so a late write can never
take a run back (a run judged stays judged). ``lost`` is not written by anyone: it is
what a reader sees when the owner is gone and no report was saved; the reader then
rebuilds the verdict (:func:`slurm_fsm.detach.settle`).

The same table draws the run's diagram (``slurm-fsm diagram --part run``) and the
states table of docs/detach.md.
"""

from __future__ import annotations

from enum import Enum

import attrs

__all__ = [
    "LOST",
    "RUN_EDGES",
    "RunEdge",
    "RunEvent",
    "RunPhase",
    "next_phase",
    "run_dot",
    "run_mermaid",
    "run_states_markdown",
]


class RunPhase(Enum):
    """How far a run got, as its owner last wrote."""

    STARTING = "starting"  # step 0, or sbatch
    RUNNING = "running"  # the job has started: its log is known
    ENDED = "ended"  # a persistent run's script has ended: its exit code is known
    DONE = "done"  # judged: the report is saved


#: What a reader calls a run whose owner is gone with no report saved (never written).
LOST = "lost"
#: The source of :attr:`RunEvent.BEGIN`: no record yet.
NONE = "(none)"


class RunEvent(Enum):
    """What moves a run."""

    BEGIN = "begin"
    STARTED = "started"
    SCRIPT_ENDED = "script_ended"
    JUDGED = "judged"
    OWNER_GONE = "owner_gone"
    REBUILT = "rebuilt"


@attrs.frozen
class RunEdge:
    """One row: ``event`` takes a run from any of ``sources`` to ``dest``; ``by`` says
    who moves it (``owner``, or ``reader``: another shell that looks), ``says`` what
    happens (the docs' words)."""

    sources: tuple[str, ...]
    event: RunEvent
    dest: str
    by: str
    says: str


_S, _R, _E, _D = (p.value for p in RunPhase)

RUN_EDGES: tuple[RunEdge, ...] = (
    RunEdge((NONE,), RunEvent.BEGIN, _S, "owner",
            "the run begins: its owner record is written"),
    RunEdge((_S, _R), RunEvent.STARTED, _R, "owner",
            "the job started: its log and allocation or job id are recorded"),
    RunEdge((_R,), RunEvent.SCRIPT_ENDED, _E, "owner",
            "a persistent run's script ended: its exit code is recorded"),
    RunEdge((_S, _R, _E, _D), RunEvent.JUDGED, _D, "owner",
            "judged: the report is saved (`source: live`; a failed step 0 included)"),
    RunEdge((_S, _R, _E), RunEvent.OWNER_GONE, LOST, "reader",
            "its owner is gone (on this host: its pid; elsewhere: its lease step or its "
            "heartbeat) and no report was saved"),
    RunEdge((LOST,), RunEvent.REBUILT, _D, "reader",
            "`report`, `wait` or `attach` rebuild the verdict (`source: rebuilt`)"),
)
"""The run's edges, in the order of a run's life."""


def next_phase(current: RunPhase | None, event: RunEvent) -> RunPhase | None:
    """The phase ``event`` takes a run in ``current`` to (``None``: no record yet);
    None when no edge of ``event`` leaves ``current`` (the write must not happen)."""
    source = NONE if current is None else current.value
    for edge in RUN_EDGES:
        if edge.event is event and source in edge.sources and edge.dest != LOST:
            return RunPhase(edge.dest)
    return None


def run_mermaid() -> str:
    """The run's diagram, a mermaid ``stateDiagram-v2`` (``%% slurm_fsm part: run``)."""
    lines = ["stateDiagram-v2", "    %% slurm_fsm part: run"]
    for edge in RUN_EDGES:
        for source in edge.sources:
            if source == edge.dest == _D:
                continue  # a saved verdict saved again: not drawn
            start = "[*]" if source == NONE else source
            by = " (a reader)" if edge.by == "reader" else ""
            lines.append(f"    {start} --> {edge.dest}: {edge.event.value}{by}")
    lines.append(f"    {_D} --> [*]")
    return "\n".join(lines) + "\n"


def run_dot() -> str:
    """The run's diagram in Graphviz dot."""
    lines = ["digraph slurm_fsm_run {",
             '  graph [rankdir=LR, bgcolor="transparent", fontname="Helvetica"];',
             '  node [shape=box, style="rounded", fontname="Helvetica", fontsize=12];',
             '  edge [fontname="Helvetica", fontsize=10, arrowsize=0.7];']
    for edge in RUN_EDGES:
        for source in edge.sources:
            if source != edge.dest:
                style = ", style=dashed" if edge.by == "reader" else ""
                lines.append(f'  "{source}" -> "{edge.dest}" '
                             f'[label="{edge.event.value}"{style}];')
    return "\n".join([*lines, "}"]) + "\n"


def run_states_markdown() -> str:
    """The table of docs/detach.md's "A run's states" (a test keeps them equal)."""
    rows = ["| from | event | what happens | to |", "|---|---|---|---|"]
    for edge in RUN_EDGES:
        sources = ", ".join(f"`{s}`" if s != NONE else s for s in edge.sources)
        rows.append(f"| {sources} | `{edge.event.value}` | {edge.says} | `{edge.dest}` |")
    return "\n".join(rows) + "\n"
