"""Issue 41 item 6: the machine fits its picture again. The design card's states and
their edges are drawn first, at the page's width; each opt-in part (admission by time
left, the warm successor) is a drawing of its own; a machine shows the part it is in."""

from __future__ import annotations

import re

import pytest

from slurm_fsm.machine import AllocationMachine
from slurm_fsm.step0.table import EDGES, PART_STATES, DiagramPart, State, part_edges, part_of_state
from slurm_fsm.testing import FakeCluster, make_spec
from slurm_fsm_dev.docgen import states_dot, states_markdown, states_svg

#: the states of the design card (docs/design.md), and the machine's own additions to
#: it that every run can meet (Failed, Gone)
CARD = {State.NoState, State.Validating, State.Expiring, State.Incompatible,
        State.Allocating, State.Importing, State.Installing, State.Ready, State.Running,
        State.Released, State.Failed, State.Gone}
#: the docs column at the site's test viewport (1280 px wide, table of contents hidden):
#: a wider core drawing is scaled below readable or scrolls
PAGE_WIDTH_PT = 700


def _arrow_indices(svg_or_dot: str) -> list[int]:
    ids = re.findall(r'id="edge(?:&#45;|-)([0-9+]+)"', svg_or_dot)
    return [int(i) for group in ids for i in group.split("+")]


def _width_pt(svg: str) -> float:
    found = re.search(r'<svg[^>]*\bwidth="([0-9.]+)pt"', svg)
    assert found is not None
    return float(found.group(1))


def test_every_edge_is_in_exactly_one_part_and_the_core_is_the_design_card() -> None:
    seen = [i for part in DiagramPart for i, _ in part_edges(part)]
    assert sorted(seen) == list(range(len(EDGES)))
    core_states = {s for _, e in part_edges(DiagramPart.CORE)
                   for s in (e.source, e.dest) if s != "*"}
    assert core_states == CARD
    assert PART_STATES[DiagramPart.SUCCESSOR] == {
        State.QueueingSuccessor, State.AwaitingSuccessor, State.Switching}
    assert PART_STATES[DiagramPart.ADMISSION] == {State.TooShort}
    assert {part_of_state(s) for s in CARD} == {DiagramPart.CORE}
    assert part_of_state(State.TooShort) is DiagramPart.ADMISSION
    assert part_of_state(State.AwaitingSuccessor) is DiagramPart.SUCCESSOR


@pytest.mark.parametrize("part", list(DiagramPart))
def test_each_part_draws_its_edges_once_and_no_state_of_another_part(
        part: DiagramPart) -> None:
    svg = states_svg(part=part)
    assert sorted(_arrow_indices(svg)) == sorted(i for i, _ in part_edges(part))
    others = {s for p, states in PART_STATES.items() if p is not part for s in states}
    for state in others:
        assert f">{state.value}</text>" not in svg, (part, state)


def test_the_core_drawing_fits_the_page_and_the_whole_did_not() -> None:
    assert _width_pt(states_svg(part=DiagramPart.CORE)) <= PAGE_WIDTH_PT
    for part in DiagramPart:
        assert _width_pt(states_svg(part=part)) <= PAGE_WIDTH_PT, part


def test_the_drawing_is_the_same_every_time() -> None:
    assert states_dot(part=DiagramPart.CORE) == states_dot(part=DiagramPart.CORE)
    assert "__any__" in states_dot(part=DiagramPart.CORE)  # the fail fan-in, once


@pytest.mark.parametrize(("state", "part"), [
    (State.Allocating, DiagramPart.CORE), (State.Switching, DiagramPart.SUCCESSOR),
    (State.TooShort, DiagramPart.ADMISSION)])
def test_a_drawing_of_the_current_state_is_its_part(state: State, part: DiagramPart) -> None:
    svg = states_svg(current=state)
    assert sorted(_arrow_indices(svg)) == sorted(i for i, _ in part_edges(part))
    node = svg.split(f'id="state&#45;{state.value}"', 1)[1].split("</a>", 1)[0]
    assert 'fill="#ffd54f"' in node, (state, node)


def test_a_machine_shows_the_part_it_is_in(tmp_path: object) -> None:
    fake = FakeCluster()
    m = AllocationMachine(make_spec(str(tmp_path)), fake, clock=fake.clock)
    assert m.prepare().state is State.Ready
    shown = m._repr_markdown_()
    assert "Switching" not in shown and "AwaitingSuccessor" not in shown
    assert "TooShort" not in shown and "class Ready current" in shown


def test_states_md_draws_the_core_first_then_each_opt_in_part() -> None:
    page = states_markdown()
    blocks = re.findall(r"^```mermaid\n(.*?)^```", page, re.M | re.S)
    parts = [re.search(r"%% slurm_fsm part: (\w+)", b) for b in blocks]
    assert [p.group(1) for p in parts if p] == [p.value for p in DiagramPart]
    assert "AwaitingSuccessor" not in blocks[0] and "TooShort" not in blocks[0]
