"""The race campaign's invariant checker (issue 28), on constructed and recorded rows:
it must be able to fail. And its schedule is a function of the seed alone."""

from __future__ import annotations

from pathlib import Path

import filelock

from slurm_fsm.state import StateStore
from slurm_fsm_dev import loginnodes
from slurm_fsm_dev.races import (
    KINDS,
    Outcome,
    Sample,
    check,
    controller_times,
    parse_sacct,
    schedule,
    summarize,
    table,
)

#: a clean race as sacct printed it on the local cluster: run on node A (lease 4.0,
#: its job's step 4.1), then node B's release cancelled allocation 4
CLEAN = "".join(
    f"{row}\n" for row in (
        "4|race-2-abc.persistent|CANCELLED by 0|2026-12-04T17:00:29|2026-12-04T17:00:29|"
        "2026-12-04T17:00:34",
        "4.0|fsm-lease.rd4b026ef14ba.1796407935|CANCELLED by 0|2026-12-04T17:00:30|"
        "2026-12-04T17:00:30|2026-12-04T17:00:32",
        "4.1|sleep|COMPLETED|2026-12-04T17:00:30|2026-12-04T17:00:30|2026-12-04T17:00:31"))
T0 = parse_sacct(CLEAN)[0].submit or 0.0
RUN = Outcome(command="run", rc=0, status="PASSED", exited=T0 + 3.5)
RELEASE = Outcome(command="release", rc=0, status="RELEASED", exited=T0 + 5.2)


def test_sacct_rows_are_parsed() -> None:
    rows = parse_sacct(CLEAN + "garbage\n")
    assert [r.job_id for r in rows] == ["4", "4.0", "4.1"]
    assert rows[0].is_allocation and not rows[1].is_allocation and rows[1].job == "4"
    assert rows[0].state == "CANCELLED" and rows[2].state == "COMPLETED"
    assert rows[0].end is not None and rows[0].end - T0 == 5


def test_a_clean_race_holds_every_invariant() -> None:
    samples = [Sample(t=T0 + 1, jobs={"4": "RUNNING"}, leases={"4.0": "rd4b026ef14ba"}),
               Sample(t=T0 + 4, jobs={"4": "RUNNING"})]
    found = check(parse_sacct(CLEAN), samples, [RUN, RELEASE],
                  kill_asked={"4": T0 + 4.6}, lease_owner={"rd4b026ef14ba": 0})
    assert found == {"double": [], "foreign_cancel": [], "unasked_kill": []}


def test_two_allocations_alive_at_once_are_a_double_allocation() -> None:
    rows = parse_sacct(CLEAN + "5|race-2-abc.persistent|CANCELLED by 0|2026-12-04T17:00:33|"
                       "2026-12-04T17:00:33|2026-12-04T17:00:40\n")
    found = check(rows, [], [RUN, RELEASE])
    assert len(found["double"]) == 1 and "4 and 5 overlap" in found["double"][0]
    # one after the other (submitted in the second the first ended) is not
    later = parse_sacct(CLEAN + "5|race-2-abc.persistent|COMPLETED|2026-12-04T17:00:34|"
                        "2026-12-04T17:00:34|2026-12-04T17:00:40\n")
    assert check(later, [], [RUN, RELEASE])["double"] == []
    # a pending duplicate counts; so does a sample with two live jobs
    sampled = check(parse_sacct(CLEAN), [Sample(t=T0 + 1, jobs={"4": "RUNNING",
                                                                "5": "PENDING"})],
                    [RUN, RELEASE])
    assert sampled["double"] == [f"squeue at {T0 + 1:.2f}: 2 live allocations 4, 5"]
    ending = check(parse_sacct(CLEAN), [Sample(t=T0 + 1, jobs={"4": "COMPLETING",
                                                               "5": "RUNNING"})],
                   [RUN, RELEASE])
    assert ending["double"] == []


#: race 72 of seed 28 as recorded: node B's step 0 cancelled node A's new allocation
#: 85 (no lease yet), node A's step 0 then allocated 86 again; all in one second
RACE_72_SACCT = (
    "85|race-72-2b0fea.persistent|CANCELLED by 0|2026-12-04T17:16:42|2026-12-04T17:16:42|"
    "2026-12-04T17:16:42\n"
    "86|race-72-2b0fea.persistent|CANCELLED by 0|2026-12-04T17:16:42|2026-12-04T17:16:42|"
    "2026-12-04T17:16:49\n")
RACE_72_LOG = """\
[2026-12-04T17:16:42.094] sched: _slurm_rpc_allocate_resources JobId=85 NodeList=n1 usec=597
[2026-12-04T17:16:42.382] _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=85 uid 0
[2026-12-04T17:16:42.437] sched: _slurm_rpc_allocate_resources JobId=86 NodeList=n1 usec=264
[2026-12-04T17:16:49.740] _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=86 uid 0
"""


def test_the_controllers_ms_decide_between_allocations_of_one_second(tmp_path: Path) -> None:
    """sacct's seconds cannot order two allocations of one second: slurmctld's log
    (ms) does. In race 72 the first was cancelled before the second was made: no
    double allocation; 0.1 s later it would have been one."""
    log = tmp_path / "slurmctld.log"
    log.write_text("[2026-12-04T17:00:00.000] before the race JobId=1\n" + RACE_72_LOG)
    made, asked = controller_times(log, len("[2026-12-04T17:00:00.000] before the race "
                                            "JobId=1\n"))
    assert sorted(made) == ["85", "86"] and sorted(asked) == ["85", "86"]
    assert asked["85"] < made["86"]
    rows = parse_sacct(RACE_72_SACCT)
    run = Outcome(command="run", rc=0, status="PASSED")
    assert check(rows, [], [run, run], kill_asked=asked, allocated=made)["double"] == []
    late = {**asked, "85": made["86"] + 0.1}
    found = check(rows, [], [run, run], kill_asked=late, allocated=made)["double"]
    assert found and "85 and 86 overlap" in found[0]


def test_a_cancel_under_a_live_lease_is_found() -> None:
    """Seen by the sampler: the lease listed after the cancel was asked."""
    samples = [Sample(t=T0 + 2, jobs={"4": "RUNNING"}, leases={"4.0": "rd4b026ef14ba"}),
               Sample(t=T0 + 2.4, jobs={"4": "COMPLETING"}, leases={"4.0": "rd4b026ef14ba"})]
    found = check(parse_sacct(CLEAN), samples, [RUN, RELEASE], kill_asked={"4": T0 + 2.2})
    assert len(found["foreign_cancel"]) == 1
    assert "cancelled at" in found["foreign_cancel"][0] and "4.0" in found["foreign_cancel"][0]


def test_a_lease_ending_with_its_allocation_while_its_owner_lived_on_is_found() -> None:
    """Seen in sacct: the lease ended with the allocation's cancel, and its owner (not
    killed) ran on long after it; a killed owner's lease is no evidence."""
    rows = parse_sacct(CLEAN.replace("17:00:32\n4.1", "17:00:34\n4.1"))
    owner = Outcome(command="run", rc=3, status="FAILED", exited=T0 + 20)
    found = check(rows, [], [owner, RELEASE], lease_owner={"rd4b026ef14ba": 0})
    assert any("whose owner (action 0) ran on" in v for v in found["foreign_cancel"])
    assert found["unasked_kill"]  # and its run did not pass
    killed = Outcome(command="run", rc=None, status=None, exited=T0 + 20, killed=True)
    assert check(rows, [], [killed, RELEASE],
                 lease_owner={"rd4b026ef14ba": 0})["foreign_cancel"] == []


def test_runs_that_were_not_killed_must_pass_and_refusals_are_documented() -> None:
    refused = Outcome(command="release-nowait", rc=3, status="ERROR",
                      summary="allocation 4 is in use by 1 running job(s): ...")
    crashed = Outcome(command="run", rc=3, status="ERROR",
                      summary="internal error: MachineError")
    killed = Outcome(command="run", rc=None, status=None, killed=True)
    found = check(parse_sacct(CLEAN), [], [killed, refused, crashed, RUN])
    assert found["unasked_kill"] == ["action 2 (run) ended ERROR (exit 3): internal error: "
                                     "MachineError"]
    bad_refusal = Outcome(command="release-nowait", rc=1, status="ERROR", summary="boom")
    assert check(parse_sacct(CLEAN), [], [bad_refusal])["unasked_kill"]


def test_the_schedule_is_a_function_of_the_seed() -> None:
    first = schedule(40, 7)
    assert first == schedule(40, 7)
    assert first != schedule(40, 8)
    assert {r.kind for r in first} == set(KINDS)
    for race in first:
        assert race.actions[0].node == "a" and race.actions[0].command == "run"
        assert race.actions[1].node == "b"
        assert (race.fault is not None) == (race.kind in ("kill9", "sigstop"))
    assert schedule(50, 7)[:40] == first  # a longer campaign begins the same


def test_the_summary_counts_races_with_a_violation_per_kind() -> None:
    results = [{"kind": "run_run", "violations": {"double": ["x", "y"], "foreign_cancel": [],
                                                  "unasked_kill": []}},
               {"kind": "run_run", "violations": {"double": [], "foreign_cancel": [],
                                                  "unasked_kill": []}},
               {"kind": "kill9", "violations": {"double": [], "foreign_cancel": [],
                                                "unasked_kill": ["z"]}}]
    summary = summarize(results)
    assert summary["total"] == {"races": 3, "double": 1, "foreign_cancel": 0,
                                "unasked_kill": 1}
    assert "| run_run | 2 | 1 | 0 | 0 |" in table(summary)


def test_a_node_local_lock_excludes_on_its_node_only(tmp_path: Path) -> None:
    """The emulation of a filesystem whose locks do not hold across hosts: a state
    file's lock under each node's own folder."""
    saved = StateStore.__init__
    try:
        state = tmp_path / "repo" / "work_dirs" / ".slurm_alloc.json"
        loginnodes.node_local_lock(tmp_path / "locks-a")
        a1, a2 = StateStore(state), StateStore(state)
        loginnodes.node_local_lock(tmp_path / "locks-b")
        b = StateStore(state)
    finally:
        StateStore.__init__ = saved  # type: ignore[method-assign]
    assert a1.lock_path == a2.lock_path and a1.lock_path.parent == tmp_path / "locks-a"
    assert b.lock_path.parent == tmp_path / "locks-b"
    assert not state.with_name(state.name + ".lock").exists()
    other = filelock.FileLock(str(a1.lock_path), timeout=0)
    with a1.locked():
        with b.locked():  # the other node's lock: not excluded
            assert b.holds_lock()
        try:
            other.acquire()
        except filelock.Timeout:
            pass  # this node's: excluded
        else:  # pragma: no cover - the lock did not hold on its own node
            other.release()
            raise AssertionError("a node-local lock did not exclude on its node")
