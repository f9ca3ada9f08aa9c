"""What a person reads of step 0's machine: the edges it may take, the diagram, the next
step, how long its container's setup took.

Theory of operation
-------------------

The driver (:class:`~slurm_fsm.machine.AllocationMachine`) shows itself through these
functions of its state, its last observation, its history and its memory; none makes
a Slurm call or changes anything.

* :func:`possible_edges`: the edges out of the current state, each judged on the last
  observation (:class:`PossibleEdge`; a list of them displays one line per edge);
* :func:`next_step`: the trigger to call next, in one sentence (under the notebook's
  diagram); :func:`markdown`: the machine as a notebook shows it;
* :func:`setup_seconds`, :func:`lead_history`, :func:`setup_note`: the parts of step
  0's setup work and their seconds (the report's timings and ``container`` note, the
  run history's lead-time parts), named by the way the container was come by.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState
from slurm_fsm.step0.outcome import (
    SETUP_CACHED,
    SETUP_COLD,
    SETUP_REUSED,
    SETUP_SHARED,
    Transition,
)
from slurm_fsm.step0.table import (
    IN_PROGRESS,
    Edge,
    Observation,
    State,
    edges_from,
    mermaid_diagram,
    part_of_state,
)

__all__ = [
    "PossibleEdge",
    "PossibleEdges",
    "diagram",
    "lead_history",
    "markdown",
    "next_step",
    "possible_edges",
    "setup_note",
    "setup_seconds",
]


@attrs.frozen(kw_only=True)
class PossibleEdge:
    """An edge that leaves the current state, judged on the last observation."""

    edge: Edge
    #: each condition (``not x`` for an unless) and whether it holds
    checks: tuple[tuple[str, bool], ...]
    #: every check holds
    holds: bool
    #: the edge the table would take for its trigger on the last observation
    chosen: bool
    #: the last observation was not made by this trigger's work in this state: the
    #: trigger observes afresh before the table chooses, so ``holds`` and ``chosen``
    #: describe the previous observation (e.g. Validating just after ``start``)
    stale: bool = False

    def __str__(self) -> str:
        """``=> advance: Validating -> Ready  [same_container=yes, ...]``: ``=>`` marks
        the chosen edge; a condition the edge needs false reads ``x=no (needs no)``.
        Judged on an older observation (:attr:`stale`), every value is ``?``: the
        trigger looks first, nothing is chosen yet."""
        e = self.edge
        src = "any" if e.source == "*" else e.source.value
        checks = ", ".join(_check_text(n, None if self.stale else v) for n, v in self.checks)
        mark = "=>" if self.chosen and not self.stale else "  "
        return (f"{mark} {e.trigger}: {src} -> {e.dest.value}"
                + (f"  [{checks}]" if checks else "")
                + ("" if self.holds or self.stale else "  (does not hold)"))


class PossibleEdges(list[PossibleEdge]):
    """What :meth:`slurm_fsm.machine.AllocationMachine.possible_edges` returns: a list of
    :class:`PossibleEdge` whose display (a notebook cell's value, ``repr``) is one line
    per edge as ``print`` shows it, not the dataclasses' repr."""

    def __repr__(self) -> str:
        return "\n".join(str(p) for p in self) if self else "(no edge leaves this state)"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        """IPython's display of the value of a cell."""
        p.text(repr(self))


def _check_text(name: str, holds: bool | None) -> str:
    """One check as a reader takes it: the condition's own value, not its negation."""
    negated = name.startswith("not ")
    cond = name[4:] if negated else name
    value = "?" if holds is None else ("yes" if holds != negated else "no")
    return f"{cond}={value}" + (" (needs no)" if negated else "")


def possible_edges(edges: Sequence[Edge], state: State, obs: Observation, spec: JobSpec,
                   trigger: str | None = None) -> PossibleEdges:
    """The edges out of ``state`` (of ``trigger``, or of every trigger but the internal
    ``fail``), in table order, each judged on ``obs``; an edge whose trigger did not make
    ``obs`` in this state is ``stale``."""
    out = []
    chosen: set[str] = set()
    for e in edges_from(trigger, state, edges):
        if trigger is None and e.trigger == "fail":
            continue
        checks = e.checks(obs, spec)
        holds = all(v for _, v in checks)
        first = holds and e.trigger not in chosen
        if first:
            chosen.add(e.trigger)
        stale = obs.source is not state or obs.trigger != e.trigger
        out.append(PossibleEdge(edge=e, checks=checks, holds=holds, chosen=first,
                                stale=stale))
    return PossibleEdges(out)


def next_step(state: State, alloc: AllocState | None, spec: JobSpec) -> str:
    """What to call next, in one sentence: the trigger of ``state``, and in Running how
    to run the job, which the machine never starts itself."""
    if state is State.NoState:
        return "start(): read the state file (no Slurm call), then advance()"
    if state in IN_PROGRESS:
        return f"advance(): do {state.value}'s work and take the edge the table chooses"
    if state is State.Ready:
        return ("run(): step 1's pre-flight (time left, GPU processes); it does not "
                "start the job. release() cancels the allocation")
    if state is State.Running:
        job = alloc.job_id if alloc is not None else "<allocation>"
        return (f"the pre-flight passed and the machine does not start the job: "
                f"slurm_fsm.Allocation(spec.repo_root, backend).run(spec) runs it on "
                f"allocation {job} (it steps a machine of its own, reusing this "
                f"allocation), or run the script yourself (SLURM_JOB_ID={job} bash "
                f"{spec.script_path}) and call finish() when it ends")
    return (f"{state.value} is final: a new AllocationMachine (or prepare()) for the "
            "next run")


def diagram(edges: Sequence[Edge], state: State) -> str:
    """The mermaid diagram of the part ``state`` is in (the design card's states, or an
    opt-in part), ``state`` highlighted."""
    return mermaid_diagram(edges, current=state, part=part_of_state(state))


def markdown(edges: Sequence[Edge], state: State, alloc: AllocState | None,
             spec: JobSpec) -> str:
    """The machine as a notebook shows it: its state, the next step, its diagram."""
    return (f"**AllocationMachine** in **{state.value}**: next, "
            f"{next_step(state, alloc, spec)}\n\n```mermaid\n{diagram(edges, state)}```\n")


def setup_seconds(history: Sequence[Transition], container_setup: str | None,
                  cache_write_s: float | None) -> dict[str, float]:
    """Seconds of step 0's setup work (:func:`slurm_fsm.history.lead_times` of the
    history): ``queue_wait_s`` (Allocating: salloc until granted), ``import_s``
    (Importing: the import, mount warm-up and GPU check), ``install_s``
    (Installing). When the container was not imported, the Importing part is named
    by what was done instead: ``reuse_check_s`` (the node's container, issue 42),
    ``cache_import_s`` (made from the image cache) or ``share_check_s`` (a live
    allocation's). ``cache_write_s``: the export to the image cache after the
    install, said apart from ``install_s``. Only the states visited."""
    from slurm_fsm.history import lead_times  # the run history's rule, loaded here

    seconds = lead_times(list(history))
    instead = {SETUP_REUSED: "reuse_check_s", SETUP_SHARED: "share_check_s",
               SETUP_CACHED: "cache_import_s"}
    if container_setup in instead and "import_s" in seconds:
        seconds[instead[container_setup]] = seconds.pop("import_s")
    if cache_write_s is not None and "install_s" in seconds:  # said apart
        seconds["install_s"] = round(max(0.0, seconds["install_s"] - cache_write_s), 3)
        seconds["cache_write_s"] = round(cache_write_s, 3)
    return seconds


def lead_history(history: Sequence[Transition], container_setup: str | None
                 ) -> list[Transition]:
    """The history as a measure of what setting up an allocation takes: without the
    Importing work when the container was not imported from the spec's image (reused
    from the node, shared, or made from the image cache), which measured no cold
    import."""
    if container_setup in (None, SETUP_COLD):
        return list(history)
    return [t for t in history if t.source != State.Importing.value]


def setup_note(seconds: dict[str, float], container_setup: str | None,
               alloc: AllocState | None, spec: JobSpec) -> str | None:
    """One line for the report's notes: which path step 0's container took and how
    long each part took (None: no container set up by this run)."""
    if container_setup is None or alloc is None:
        return None
    took = ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.1f} s"
                     for k, v in seconds.items())
    return (f"container {spec.container_name!r}: {container_setup} on "
            f"{alloc.nodelist} ({took})")
