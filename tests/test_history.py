"""The run history and the expected duration of a job (admission by time left): the
pure estimator as a table, the history file (additive, bounded, never failing a run),
and the lead-time parts read from the machine's transitions."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs
import pytest

from slurm_fsm.history import (
    HISTORY_RUNS,
    MAX_HISTORY_BYTES,
    Estimate,
    RunEntry,
    RunHistory,
    expected_duration,
    lead_times,
    p95,
    record_run,
    spec_key,
)
from slurm_fsm.paths import StatePaths
from slurm_fsm.report import Report
from slurm_fsm.results import Status
from slurm_fsm.spec import EXPIRY_MARGIN_S
from slurm_fsm.testing import make_spec

# --------------------------------------------------------------- the estimator's table

#: (spec overrides, past PASSED durations, expected seconds, source)
ESTIMATES: list[tuple[dict[str, Any], list[float], int | None, str]] = [
    # the spec's own figure wins over everything
    ({"expected_duration_seconds": 600, "slurm_params": {"time_limit": "01:00:00"}},
     [30.0], 600, "expected_duration_seconds"),
    # a time limit is an upper bound, not an estimate (issue 41): past runs decide
    ({"slurm_params": {"time_limit": "00:20:00"}}, [30.0], 30, "history"),
    ({"slurm_params": {"time_limit": "00:20:00"}}, [], None, "unknown"),
    # then the p95 of past PASSED runs (nearest rank, rounded up to a second)
    ({}, [10.0, 20.0, 30.2], 31, "history"),
    ({}, [float(i) for i in range(1, 101)], 99, "history"),  # newest 20: 81..100
    # only the newest HISTORY_RUNS count: an old slow run is forgotten
    ({}, [5000.0] + [10.0] * HISTORY_RUNS, 10, "history"),
    # nor is monitor_timeout_seconds: no PASSED run, unknown (admitted by the margin)
    ({"monitor_timeout_seconds": 900}, [], None, "unknown"),
    # a guess no new allocation could hold: unknown, admitted by the margin alone
    ({"alloc_time_limit": "01:00:00"}, [3500.0], None, "unknown"),
    ({"alloc_time_limit": "00:30:00", "monitor_timeout_seconds": 60}, [1700.0], None,
     "unknown"),
    # a guess that fits exactly (1500 + 300 = 1800) is kept
    ({"alloc_time_limit": "00:30:00"}, [1500.0], 1500, "history"),
    # an unlimited allocation holds any guess
    ({"alloc_time_limit": "UNLIMITED"}, [50000.0], 50000, "history"),
]


@pytest.mark.parametrize(("over", "past", "seconds", "source"), ESTIMATES)
def test_expected_duration_table(tmp_path: Path, over: dict[str, Any], past: list[float],
                                 seconds: int | None, source: str) -> None:
    est = expected_duration(make_spec(tmp_path, **over), past)
    assert (est.seconds, est.source) == (seconds, source), est
    assert est.known is (seconds is not None)
    text = est.describe()
    assert (source in text) if seconds is not None else ("unknown" in text)


def test_p95_is_one_of_the_values() -> None:
    assert p95([3.0]) == 3.0
    assert p95([1.0, 2.0]) == 2.0
    assert p95([float(i) for i in range(20)]) == 18.0
    with pytest.raises(ValueError):
        p95([])


def test_the_key_names_what_makes_a_spec_the_same(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    assert spec_key(spec) == spec_key(make_spec(tmp_path))
    # what does not change the job's length does not change the key
    assert spec_key(spec) == spec_key(make_spec(tmp_path, monitor_timeout_seconds=5,
                                                alloc_time_limit="02:00:00"))
    for other in ({"model_name": "other"}, {"slurm_params": {"nodes": 2}},
                  {"workflow_type": "custom"}, {"script_path": str(tmp_path / "b.slurm")}):
        if "script_path" in other:
            (tmp_path / "b.slurm").write_text("#!/bin/bash\n")
        assert spec_key(make_spec(tmp_path, **other)) != spec_key(spec), other


# ------------------------------------------------------------------- the history file


def report(status: Status = Status.PASSED, elapsed: float | None = 12.5,
           mode: str = "persistent") -> Report:
    return Report(status=status, task_type="pytest", mode=mode, elapsed_s=elapsed,
                  allocation_id="42", log_files={}, work_dir="/w", summary="")


@attrs.frozen
class Step:
    clock: float
    source: str
    dest: str


def test_a_run_is_recorded_and_feeds_the_next_estimate(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, monitor_timeout_seconds=900)
    path = StatePaths.for_state_file(spec.state_path).history
    assert path == spec.state_path.with_name(".slurm_fsm_history.jsonl")
    history = RunHistory(path)
    assert history.estimate(spec).source == "unknown"  # the monitor timeout is a bound
    for elapsed in (10.0, 40.0):
        assert record_run(path, spec, report(elapsed=elapsed)) is None
    # a failed run and another spec's run do not count for this spec
    assert record_run(path, spec, report(Status.FAILED, elapsed=800.0)) is None
    assert record_run(path, make_spec(tmp_path / "o", model_name="x"), report(elapsed=700)) \
        is None
    assert history.durations(spec_key(spec)) == [10.0, 40.0]
    assert history.estimate(spec) == Estimate(40, "history", "p95 of 2 PASSED run(s)")
    line = json.loads(path.read_text().splitlines()[0])
    assert line["key"] == spec_key(spec) and line["status"] == "PASSED"
    assert line["run_s"] == 10.0 and line["partition"] == "batch" and line["nodes"] == 1


def test_the_fake_backends_history_is_its_own(tmp_path: Path) -> None:
    fake = tmp_path / ".slurm_alloc.fake.json"
    assert StatePaths.for_state_file(fake).history.name == ".slurm_fsm_history.fake.jsonl"
    other = tmp_path / "state.json"
    assert StatePaths.for_state_file(other).history.name == "state.json.history.jsonl"


def test_nothing_measured_writes_nothing(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    path = StatePaths.for_state_file(spec.state_path).history
    assert record_run(path, spec, report(Status.RELEASED, elapsed=None, mode="release")) \
        is None
    assert not path.exists()


def test_lead_times_are_the_setup_states_durations(tmp_path: Path) -> None:
    steps = [Step(0.0, "NoState", "Allocating"), Step(30.0, "Allocating", "Importing"),
             Step(42.5, "Importing", "Installing"), Step(62.5, "Installing", "Ready"),
             Step(63.0, "Ready", "Running"), Step(80.0, "Running", "Ready")]
    assert lead_times(steps) == {"queue_wait_s": 30.0, "import_s": 12.5, "install_s": 20.0}
    reuse = [Step(0.0, "NoState", "Validating"), Step(0.1, "Validating", "Ready")]
    assert lead_times(reuse) == {}
    spec = make_spec(tmp_path)
    path = StatePaths.for_state_file(spec.state_path).history
    # a run that failed in step 0 still records what its setup took
    assert record_run(path, spec, report(Status.ERROR, elapsed=None), steps[:3]) is None
    (entry,) = RunHistory(path).entries()
    assert entry.queue_wait_s == 30.0 and entry.import_s == 12.5 and entry.install_s is None
    assert entry.run_s is None and entry.status == "ERROR"


def test_an_unwritable_history_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    path = StatePaths.for_state_file(spec.state_path).history
    path.parent.mkdir(parents=True)
    path.mkdir()  # a folder where the file should be
    warning = record_run(path, spec, report())
    assert warning is not None and str(path) in warning
    assert RunHistory(path).entries() == []  # and reading it is no failure either


def test_bad_lines_and_unknown_keys_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    good = RunEntry(key="k", status="PASSED", run_s=5.0).to_json()
    later = json.dumps({"key": "k", "status": "PASSED", "run_s": 7, "new_field": [1]})
    path.write_text("\n".join([good, "{cut", "[]", '{"no": "key"}',
                               json.dumps({"key": "k", "status": "PASSED", "run_s": "x"}),
                               json.dumps({"key": "k", "status": "PASSED", "run_s": -1}),
                               later]) + "\n")
    assert RunHistory(path).durations("k") == [5.0, 7.0]


def test_the_history_is_bounded(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    path = StatePaths.for_state_file(spec.state_path).history
    history = RunHistory(path)
    n = 0
    while n < 3000:
        history.append(RunEntry(key=spec_key(spec), status="PASSED", run_s=float(n),
                                at="2026-12-03T00:00:00+00:00", partition="batch" * 10))
        n += 1
        assert os.path.getsize(path) <= MAX_HISTORY_BYTES
    kept = history.entries()
    assert 0 < len(kept) < n
    assert kept[-1].run_s == float(n - 1)  # the newest are kept, in order
    runs = [e.run_s for e in kept]
    assert runs == sorted(runs)


def test_the_spec_field_is_validated(tmp_path: Path) -> None:
    from slurm_fsm.errors import SpecError

    for bad in (0, -5, "ten", 1.5, True):
        with pytest.raises(SpecError, match="expected_duration_seconds"):
            make_spec(tmp_path, expected_duration_seconds=bad)
    assert make_spec(tmp_path, expected_duration_seconds=60).expected_duration_seconds == 60


@pytest.mark.parametrize(("over", "field"), [
    ({"expected_duration_seconds": 4 * 3600 - EXPIRY_MARGIN_S + 1}, "expected_duration_seconds"),
    ({"alloc_time_limit": "00:30:00", "expected_duration_seconds": 1501},
     "expected_duration_seconds"),
])
def test_a_job_no_new_allocation_can_hold_is_bad_input(tmp_path: Path, over: dict[str, Any],
                                                        field: str) -> None:
    from slurm_fsm.errors import SpecError

    with pytest.raises(SpecError) as info:
        make_spec(tmp_path, **over)
    (problem,) = info.value.problems
    assert problem.startswith(f"{field}: the job expects") and "alloc_time_limit" in problem


def test_what_fits_a_new_allocation_or_is_not_persistent_is_accepted(tmp_path: Path) -> None:
    make_spec(tmp_path, alloc_time_limit="00:30:00", expected_duration_seconds=1500)
    # a time limit is an upper bound, not an estimate (issue 41): equal to
    # alloc_time_limit, or longer than a new allocation admits, the job runs
    make_spec(tmp_path, slurm_params={"time_limit": "04:00:00"}, alloc_time_limit="04:00:00")
    make_spec(tmp_path, alloc_time_limit="00:30:00", slurm_params={"time_limit": "00:26:00"})
    # the spec's own figure, not the time limit, is the expected duration
    make_spec(tmp_path, alloc_time_limit="00:30:00", expected_duration_seconds=600,
              slurm_params={"time_limit": "01:00:00"})
    # one-shot: no allocation to fit in; release: no job
    make_spec(tmp_path, persistent_mode=False, log_file_pattern="x.log",
              expected_duration_seconds=10 * 3600)
    make_spec(tmp_path, release_allocation=True, alloc_time_limit="00:30:00",
              expected_duration_seconds=10 * 3600)


def test_each_line_is_parsed_once_and_every_change_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run of a ``run_many`` reads the history for its estimate (issue 28), and a
    full history is thousands of lines: a read parses only the lines appended since the
    last read of the file; a file rewritten (a trim: another file; in place: other first
    bytes; shorter) is read whole again; a line still being written waits."""
    parsed: list[str] = []
    real = RunEntry.from_json

    def counting(line: str) -> RunEntry | None:
        parsed.append(line)
        return real(line)

    monkeypatch.setattr(RunEntry, "from_json", staticmethod(counting))
    path = tmp_path / "h.jsonl"
    history = RunHistory(path)
    history.append(RunEntry(key="k", status="PASSED", run_s=5.0))
    assert history.durations("k") == [5.0]
    assert len(parsed) == 1
    assert RunHistory(path).durations("k") == [5.0]  # another reader, the same file
    assert len(parsed) == 1
    history.append(RunEntry(key="k", status="PASSED", run_s=7.0))
    assert RunHistory(path).durations("k") == [5.0, 7.0]
    assert len(parsed) == 2  # only the new line
    entries = history.entries()
    entries.clear()  # a caller's list is its own
    assert history.durations("k") == [5.0, 7.0]

    with path.open("ab") as fh:  # a writer half-way through its line
        fh.write(b'{"key":"k","run_s":9.0,')
    assert history.durations("k") == [5.0, 7.0] and len(parsed) == 2
    with path.open("ab") as fh:
        fh.write(b'"status":"PASSED"}\n')
    assert history.durations("k") == [5.0, 7.0, 9.0] and len(parsed) == 3

    text = path.read_text()
    path.write_text(text.replace("5.0", "6.0"))  # in place, the same size
    assert history.durations("k") == [6.0, 7.0, 9.0]
    path.write_text(RunEntry(key="k", status="PASSED", run_s=1.0).to_json() + "\n")
    assert history.durations("k") == [1.0]  # shorter
    history._trim()  # another file (write_atomic)
    assert history.durations("k") == [1.0]
    path.unlink()
    assert history.entries() == []


# ------------------------------------------------ hostile lines and files (issue 43 item 5)

#: lines another program (or a user) could put in the file: each is skipped, never raised
HOSTILE_LINES = [
    '{"key":"k","status":"PASSED","run_s":' + "9" * 400 + "}",  # int past float range
    '{"key":"k","status":"PASSED","import_s":1' + "0" * 5000 + "}",  # past int digits
    "[" * 5000 + "]" * 5000,  # nesting past the recursion limit
    "[" * 2000 + "]" * 2000,  # the same within the length bound
    '{"key":"k","x":' + "[" * 3000 + "]" * 3000 + "}",
    '{"key":"k","status":"PASSED","run_s":5,"nodes":' + "9" * 400 + "}",
    '{"key":"' + "k" * 100_000 + '","status":"PASSED","run_s":5}',  # an endless line
    '{"key":"k","status":"PASSED","run_s":1e999}',
    '{"key":"k","status":"PASSED","run_s":NaN}',
    '{"key":"k","status":"PASSED","run_s":5,"nodes":-3}',
]


@pytest.mark.parametrize("line", HOSTILE_LINES, ids=range(len(HOSTILE_LINES)))
def test_a_hostile_line_is_skipped_never_raised(tmp_path: Path, line: str) -> None:
    path = tmp_path / "h.jsonl"
    good = RunEntry(key="k", status="PASSED", run_s=5.0).to_json()
    path.write_text(f"{good}\n{line}\n{good}\n")
    entries = RunHistory(path).entries()
    assert [e.run_s for e in entries if e.key == "k" and e.status == "PASSED"][:1] == [5.0]
    assert all(e.key == "k" for e in entries)
    assert all(e.nodes is None or 0 < e.nodes <= 1_000_000 for e in entries)
    assert RunEntry.from_json(line) is None or RunEntry.from_json(line) in entries


def test_a_history_others_can_write_is_not_read_and_not_extended(tmp_path: Path) -> None:
    """A history file of the user that the group or others can write could hold anyone's
    lines: it is not read (the estimate falls back), and the next run's entry starts a
    new private file instead of trusting what is there."""
    path = tmp_path / "h.jsonl"
    planted = RunEntry(key="k", status="PASSED", run_s=99999.0).to_json()
    for mode in (0o666, 0o646, 0o664):
        path.write_text(planted + "\n")
        path.chmod(mode)
        assert RunHistory(path).entries() == [], oct(mode)
    RunHistory(path).append(RunEntry(key="k", status="PASSED", run_s=5.0))
    assert path.stat().st_mode & 0o022 == 0
    assert RunHistory(path).durations("k") == [5.0]


def test_an_unterminated_line_never_costs_the_runs_own_entry(tmp_path: Path) -> None:
    """Issue 43 item 8: a history of one huge line without its newline: the run's
    own entry goes on a line of its own and survives the trim."""
    path = tmp_path / "h.jsonl"
    with path.open("wb") as fh:
        fh.write(b'{"key":"junk","pad":"' + b"x" * (3 * MAX_HISTORY_BYTES))
    path.chmod(0o644)
    history = RunHistory(path)
    history.append(RunEntry(key="k", status="PASSED", run_s=5.0))
    assert os.path.getsize(path) <= MAX_HISTORY_BYTES  # trimmed
    assert history.durations("k") == [5.0]
