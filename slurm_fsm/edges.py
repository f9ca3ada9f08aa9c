"""The edge table of step 0, under its public name.

The table lives in :mod:`slurm_fsm.step0.table` (issue 40: step 0 is one package);
this module re-exports its names, because ``slurm_fsm.edges`` is public API (the API
reference, docs/testing.md's "ask the table directly"). It defines nothing: a test
checks that every name here is the table's own object.
"""

from __future__ import annotations

from slurm_fsm.step0.table import (
    CONDITIONS,
    EDGES,
    EXPIRY_MARGIN_S,
    IN_PROGRESS,
    PART_STATES,
    RULES,
    Condition,
    DiagramPart,
    Edge,
    Effect,
    Observation,
    State,
    choose,
    dot_diagram,
    edges_from,
    incompatibilities,
    is_compatible,
    is_ours,
    job_expiring,
    job_fits,
    mermaid_diagram,
    owner_of,
    part_edges,
    part_of_edge,
    part_of_state,
    remaining_after,
    repo_tag,
    same_container,
    same_generation,
    state_job_names,
)

__all__ = [
    "CONDITIONS",
    "EDGES",
    "EXPIRY_MARGIN_S",
    "IN_PROGRESS",
    "PART_STATES",
    "RULES",
    "Condition",
    "DiagramPart",
    "Edge",
    "Effect",
    "Observation",
    "State",
    "choose",
    "dot_diagram",
    "edges_from",
    "incompatibilities",
    "is_compatible",
    "is_ours",
    "job_expiring",
    "job_fits",
    "mermaid_diagram",
    "owner_of",
    "part_edges",
    "part_of_edge",
    "part_of_state",
    "remaining_after",
    "repo_tag",
    "same_container",
    "same_generation",
    "state_job_names",
]
