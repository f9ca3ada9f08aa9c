"""The edge table alone (h11's test_state style): build an observation, ask which
edge is chosen, assert the destination and the effects. No fake cluster, no clock,
no file: the table is pure."""

from __future__ import annotations

import inspect
from pathlib import Path

import attrs
import pytest

from slurm_fsm.backend import JobInfo
from slurm_fsm.duration import Duration
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState
from slurm_fsm.step0.table import (
    CONDITIONS,
    EDGES,
    IN_PROGRESS,
    Edge,
    Effect,
    Observation,
    State,
    choose,
    edges_from,
    repo_tag,
)
from slurm_fsm.testing import make_spec

S = State
USER = "tester"


@pytest.fixture
def spec(tmp_path: Path) -> JobSpec:
    return make_spec(tmp_path)


def alloc_for(spec: JobSpec, **over: object) -> AllocState:
    p = spec.slurm_params
    a = AllocState(job_id="42", nodelist="node01", partition=p.partition, account=p.account,
                   nodes=p.nodes, docker_image=spec.docker_image,
                   container_name=spec.container_name, installed=True)
    return attrs.evolve(a, **over)


def job(spec: JobSpec, state: str = "RUNNING", left: str = "00:50:00", **over: object) -> JobInfo:
    info = JobInfo(job_id="42", state=state, name=spec.job_name, user=USER,
                   nodelist="node01" if state == "RUNNING" else "",
                   time_left=Duration.parse(left), comment=repo_tag(spec))
    return attrs.evolve(info, **over)


def validated(spec: JobSpec, **fields: object) -> Observation:
    """What Validating's work would have returned."""
    base = dict(trigger="advance", source=S.Validating, alloc=alloc_for(spec), user=USER)
    return Observation(**{**base, **fields})  # type: ignore[arg-type]


def dest(spec: JobSpec, obs: Observation, trigger: str = "advance",
         state: State = S.Validating) -> State:
    edge = choose(trigger, state, obs, spec)
    assert edge is not None
    return edge.dest


# ------------------------------------------------------------------------ the start


def test_start_follows_the_state_file(spec: JobSpec) -> None:
    assert dest(spec, Observation(alloc=alloc_for(spec)), "start", S.NoState) is S.Validating
    assert dest(spec, Observation(), "start", S.NoState) is S.Allocating
    unreadable = Observation(state_file_problem="not valid JSON")
    assert dest(spec, unreadable, "start", S.NoState) is S.Allocating


# ------------------------------------------------------------------ every Validating branch


def test_reuse(spec: JobSpec) -> None:
    edge = choose("advance", S.Validating, validated(spec, info=job(spec)), spec)
    assert edge is not None and edge.dest is S.Ready
    assert Effect.DROP_STATE_FILE not in edge.effects


def test_gone_drops_the_state_file(spec: JobSpec) -> None:
    for obs in (validated(spec, gone=True),
                validated(spec, info=job(spec, "COMPLETING")),
                validated(spec, info=job(spec, "CANCELLED"))):
        edge = choose("advance", S.Validating, obs, spec)
        assert edge is not None and edge.dest is S.NoState
        assert edge.effects == (Effect.DROP_STATE_FILE,)


def test_unreachable_retries_while_retries_are_left(spec: JobSpec) -> None:
    retry = validated(spec, unreachable=True, retries_left=1)
    assert dest(spec, retry) is S.Validating
    edge = choose("advance", S.Validating, attrs.evolve(retry, retries_left=0), spec)
    assert edge is not None and edge.dest is S.Failed
    assert edge.effects == (Effect.RECORD_FAILURE,)  # and the state file is kept


@pytest.mark.parametrize("other", [{"user": "bob"}, {"comment": "slurm_fsm:/elsewhere"},
                                   {"comment": "", "name": "interactive"}])
def test_not_ours_is_dropped_and_never_cancelled(spec: JobSpec, other: dict[str, str]) -> None:
    for state in ("RUNNING", "PENDING"):  # a pending job of someone else is not waited for
        edge = choose("advance", S.Validating,
                      validated(spec, info=job(spec, state, **other)), spec)
        assert edge is not None and edge.dest is S.NoState
        assert Effect.DROP_STATE_FILE in edge.effects and Effect.CANCEL not in edge.effects


def test_pending_waits_while_wait_is_left_then_fails(spec: JobSpec) -> None:
    pending = validated(spec, info=job(spec, "PENDING", "01:00:00"), pending_wait_left_s=600)
    edge = choose("advance", S.Validating, pending, spec)
    assert edge is not None and edge.dest is S.Validating and edge.effects == ()
    edge = choose("advance", S.Validating, attrs.evolve(pending, pending_wait_left_s=0), spec)
    assert edge is not None and edge.dest is S.Failed
    assert edge.effects == (Effect.RECORD_FAILURE,)
    assert Effect.CANCEL not in edge.effects


def test_expiring_warns_and_is_replaced(spec: JobSpec) -> None:
    edge = choose("advance", S.Validating, validated(spec, info=job(spec, left="00:05:00")),
                  spec)
    assert edge is not None and edge.dest is S.Expiring
    assert edge.effects == (Effect.WARN_EXPIRING,)
    assert dest(spec, validated(spec, info=job(spec, left="00:06:00"))) is S.Ready
    leave = choose("advance", S.Expiring, Observation(), spec)
    assert leave is not None and leave.dest is S.Allocating
    assert leave.effects == (Effect.CANCEL, Effect.DROP_STATE_FILE)


@pytest.mark.parametrize(("left", "expected_s", "dest_state"), [
    ("00:50:00", None, S.Ready),        # unknown duration: admitted by the margin alone
    ("00:50:00", 2700, S.Ready),        # 45 min + 5 min margin: exactly fits
    ("00:50:00", 2701, S.TooShort),     # one second more does not
    ("00:10:00", 60, S.Ready),
    ("00:10:00", 301, S.TooShort),
    ("UNLIMITED", 10**7, S.Ready),      # an unlimited allocation holds anything
    ("00:05:00", 1, S.Expiring),        # within the margin: expiring comes first
])
def test_admission_by_time_left(spec: JobSpec, left: str, expected_s: int | None,
                                dest_state: State) -> None:
    obs = validated(spec, info=job(spec, left=left), expected_s=expected_s,
                    expected="expects ...")
    edge = choose("advance", S.Validating, obs, spec)
    assert edge is not None and edge.dest is dest_state
    if dest_state is S.TooShort:
        assert edge.effects == (Effect.WARN_TOO_SHORT,)  # nothing cancelled yet
        assert Effect.CANCEL not in edge.effects and Effect.DROP_STATE_FILE not in edge.effects


def test_a_job_that_does_not_fit_replaces_the_allocation(spec: JobSpec) -> None:
    leave = choose("advance", S.TooShort, Observation(), spec)
    assert leave is not None and leave.dest is S.Allocating
    assert leave.effects == (Effect.CANCEL, Effect.DROP_STATE_FILE)


def test_incompatibility_is_judged_before_admission(spec: JobSpec) -> None:
    small = validated(spec, info=job(spec), alloc=alloc_for(spec, nodes=0), expected_s=10**6)
    assert dest(spec, small) is S.Incompatible
    pending = validated(spec, info=job(spec, "PENDING", "01:00:00"), pending_wait_left_s=600,
                        expected_s=10**6)
    assert dest(spec, pending) is S.Validating  # a pending allocation is waited for first


def test_incompatible_branches(spec: JobSpec) -> None:
    assert dest(spec, validated(spec, info=job(spec, "SUSPENDED"))) is S.Incompatible
    small = validated(spec, info=job(spec), alloc=alloc_for(spec, nodes=0))
    assert dest(spec, small) is S.Incompatible
    renamed = validated(spec, info=job(spec, name="acct-old.persistent"))
    assert dest(spec, renamed) is S.Incompatible
    leave = choose("advance", S.Incompatible, Observation(), spec)
    assert leave is not None and leave.effects == (Effect.CANCEL, Effect.DROP_STATE_FILE)


def test_container_and_install(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, docker_image="img:1", container_name="llama")
    other = validated(spec, info=job(spec), alloc=alloc_for(spec, container_name="mistral"))
    edge = choose("advance", S.Validating, other, spec)
    assert edge is not None and edge.dest is S.Importing
    assert edge.effects == (Effect.COMPLETE_NODELIST,)
    unfinished = validated(spec, info=job(spec), alloc=alloc_for(spec, installed=False))
    assert dest(spec, unfinished) is S.Installing


def test_allocating_importing_follow_the_spec(tmp_path: Path) -> None:
    plain = make_spec(tmp_path)
    image = make_spec(tmp_path, docker_image="img:1", container_name="c")
    custom = make_spec(tmp_path, docker_image="img:1", container_name="c",
                       workflow_type="custom", skip_install=True)
    assert dest(plain, Observation(), state=S.Allocating) is S.Ready
    assert dest(image, Observation(), state=S.Allocating) is S.Importing
    assert dest(image, Observation(), state=S.Importing) is S.Installing
    assert dest(custom, Observation(), state=S.Importing) is S.Ready


def test_finish_with_the_allocation_gone_drops_the_state_file(spec: JobSpec) -> None:
    edge = choose("finish", S.Running, Observation(gone=True), spec)
    assert edge is not None and edge.dest is S.Gone and edge.effects == (Effect.DROP_STATE_FILE,)
    assert dest(spec, Observation(), "finish", S.Running) is S.Ready


def test_an_illegal_trigger_has_no_edge(spec: JobSpec) -> None:
    assert choose("run", S.NoState, Observation(), spec) is None
    assert choose("advance", S.Ready, Observation(), spec) is None
    assert edges_from("finish", S.Allocating) == []


# ------------------------------------------------------------------ the table's shape


def test_every_in_progress_state_always_has_a_way_out(spec: JobSpec) -> None:
    """advance never stalls: the last edge of every in-progress state is unconditional."""
    for state in IN_PROGRESS:
        last = [e for e in edges_from("advance", state)][-1]
        assert last.conditions == () and last.unless == (), state


def test_conditions_read_only_the_observation_and_the_spec() -> None:
    for name, fn in CONDITIONS.items():
        params = list(inspect.signature(fn).parameters)
        assert len(params) == 2, name
        source = inspect.getsource(fn)
        assert "_attempt" not in source and "_pending_since" not in source, name


def test_unknown_condition_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown condition"):
        Edge("advance", S.Validating, S.Ready, conditions=("job_runing",))


def test_the_table_is_data_only() -> None:
    import slurm_fsm.step0.table as edges

    source = inspect.getsource(edges)
    for word in ("subprocess", "open(", ".now()", "sleep(", "import os"):
        assert word not in source, word
    assert {e.source for e in EDGES if isinstance(e.source, State)} | {
        e.dest for e in EDGES} == set(State)
