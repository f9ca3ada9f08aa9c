"""The record files keep their format across the move to the one converter (issue 40
item 5). ``tests/data/records/`` holds files written by the code before the move
(``make_records.py``, run once then): each must load to the same record and be written
back byte for byte; a bad file is skipped or refused as before, and where it is named to
a person (a run book's skipped files) the field is named too."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from slurm_fsm.history import RunEntry, RunHistory
from slurm_fsm.report import Report, Status
from slurm_fsm.runowner import Owner, OwnerRecord, RunFiles, RunPhase, SavedReport
from slurm_fsm.runrecord import RunBook, RunRecord, StepMark
from slurm_fsm.successor import Phase, SuccessorRecord, read_successor

DATA = Path(__file__).parent / "data" / "records"
RUN = "r0123456789ab"


def _book(tmp_path: Path, *names: str) -> RunBook:
    state = tmp_path / ".slurm_alloc.json"
    book = RunBook(state)
    for name in names:
        target = book.path(json.loads((DATA / name).read_text())["run_id"])
        shutil.copy(DATA / name, target)
        os.chmod(target, 0o600)
    return book


def test_a_run_record_of_the_previous_version_loads_and_is_written_back_the_same(
        tmp_path: Path) -> None:
    book = _book(tmp_path, "run_record.json", "run_record_minimal.json")
    records = {r.run_id: r for r in book.records()}
    assert book.skipped == {}
    rec = records[RUN]
    assert rec.steps == (StepMark(step_id="3", name="bash", srun_host="login1",
                                  srun_pid=4242, start_time="2026-12-07T04:00:01"),
                         StepMark(step_id="4+1"))
    assert rec.script == {"pgid": 777, "token": "t0k3n", "fake_step": "2",
                          "fake_job": "1234"}
    assert (rec.srun_pids, rec.seen_steps, rec.ended) == ((4242, 4343), ("3", "4+1"), True)
    assert rec.lease == "slurm_fsm_lease_r0123456789ab"
    assert rec.to_json() == (DATA / "run_record.json").read_bytes()
    small = records["r00000000000f"]
    assert (small.steps, small.script, small.lease, small.ended) == ((), {}, "", False)
    assert small.to_json() == (DATA / "run_record_minimal.json").read_bytes()


def test_a_run_record_keeps_its_lenient_parts(tmp_path: Path) -> None:
    """What the hand reader forgave, the converter forgives: a bare step id of an older
    record, pids that are not numbers, a seen step that is no step id, a null script."""
    data = json.loads((DATA / "run_record.json").read_text())
    data["steps"] = ["3", {"step_id": "x"}, {"step_id": "5", "srun_pid": "no"},
                     {"step_id": "6"}]
    data["srun_pids"] = [1, "2", None]
    data["seen_steps"] = ["3", "no", 4]
    data["script"] = None
    data["lease"] = None
    data["extra"] = "ignored"
    rec = RunRecord.from_dict(data)
    assert rec is not None
    assert (rec.steps, rec.srun_pids, rec.seen_steps, rec.script, rec.lease) == (
        (StepMark(step_id="6"),), (1,), ("3",), {}, "")


@pytest.mark.parametrize(("change", "field"), [
    ({"pid": "many"}, "pid"), ({"run_id": None}, "run_id"), ({"uid": None}, "uid"),
    ({"script": "text"}, "script"),
])
def test_a_bad_run_record_is_skipped_naming_its_file_and_field(
        tmp_path: Path, change: dict[str, object], field: str) -> None:
    book = _book(tmp_path)
    data = json.loads((DATA / "run_record.json").read_text())
    data.update(change)
    path = book.path(RUN)
    path.write_text(json.dumps(data))
    os.chmod(path, 0o600)
    assert book.records() == []
    assert list(book.skipped) == [str(path)]
    assert field in book.skipped[str(path)], book.skipped


def test_a_run_record_missing_a_field_is_skipped_naming_it(tmp_path: Path) -> None:
    book = _book(tmp_path)
    data = json.loads((DATA / "run_record.json").read_text())
    del data["boot_id"]
    path = book.path(RUN)
    path.write_text(json.dumps(data))
    os.chmod(path, 0o600)
    assert book.records() == []
    assert "boot_id" in book.skipped[str(path)], book.skipped


def test_an_owner_record_and_saved_report_of_the_previous_version_load(
        tmp_path: Path) -> None:
    files = RunFiles(tmp_path / ".slurm_alloc.json")
    files.owner_path(RUN).parent.mkdir(parents=True, exist_ok=True)
    for name, target in (("owner_record.json", files.owner_path(RUN)),
                         ("saved_report.json", files.report_path(RUN))):
        shutil.copy(DATA / name, target)
        os.chmod(target, 0o600)
    owner = files.owner(RUN)
    assert owner == OwnerRecord(
        run_id=RUN, owner=Owner.SUPERVISOR, pid=999, pid_ticks=123456, host="login1",
        boot_id="b0d1e2f3", uid=1000, since="2026-12-07T04:00:00+00:00",
        mode="persistent", spec_path="/w/job_spec.json",
        spec={"model_name": "m1", "nodes": 1}, phase=RunPhase.ENDED, log="/w/m1.log",
        allocation_id="1234", progress="/w/.progress", lease="lease1", exit_code=0)
    assert owner.to_json() == (DATA / "owner_record.json").read_bytes()
    saved = files.report(RUN)
    assert saved is not None
    assert saved.report == Report(status=Status.PASSED, task_type="pytest",
                                  mode="persistent", allocation_id="1234", exit_code=0,
                                  elapsed_s=1.5, summary="ok", timings={"run_s": 1.5})
    assert (saved.source, saved.spec_path) == ("rebuilt", "/w/job_spec.json")
    assert saved.to_json() == (DATA / "saved_report.json").read_bytes()


@pytest.mark.parametrize("change", [{"pid": True}, {"owner": "nobody"}, {"spec": []},
                                    {"exit_code": "0"}, {"log": 3}, {"run_id": "x"}])
def test_a_bad_owner_record_is_no_record(change: dict[str, object]) -> None:
    data = json.loads((DATA / "owner_record.json").read_text())
    data.update(change)
    assert OwnerRecord.from_dict(data) is None


def test_history_entries_of_the_previous_version_load(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    shutil.copy(DATA / "history.jsonl", path)
    entries = RunHistory(path).entries()
    assert entries == [
        RunEntry(key="k1", at="2026-12-07T04:00:00+00:00", status="PASSED",
                 mode="persistent", run_s=1.5, allocation="1234", queue_wait_s=2.0,
                 import_s=3, install_s=0.25, partition="gpu", nodes=2, image="img"),
        RunEntry(key="k2")]
    assert "".join(e.to_json() + "\n" for e in entries) == (DATA / "history.jsonl").read_text()


@pytest.mark.parametrize(("line", "want"), [
    ('{"key":"k","run_s":-1,"nodes":0,"status":3,"image":"i"}', RunEntry(key="k", image="i")),
    ('{"key":"k","import_s":true,"nodes":true}', RunEntry(key="k")),
    ('{"key":"k","run_s":1e999}', RunEntry(key="k")),
    ('{"key":"k","queue_wait_s":' + "9" * 400 + "}", RunEntry(key="k")),
    ('{"key":3}', None), ("[]", None), ("{", None), ('{"status":"PASSED"}', None),
])
def test_a_history_line_keeps_its_good_fields_or_is_none(line: str,
                                                          want: RunEntry | None) -> None:
    assert RunEntry.from_json(line) == want


def test_a_successor_record_of_the_previous_version_loads(tmp_path: Path) -> None:
    rec = read_successor(DATA / "successor.json")
    assert rec == SuccessorRecord(
        job_id="1235", job_name="slurm_fsm_next", predecessor="1234", phase=Phase.READY,
        requested_at="2026-12-07T04:00:00+00:00", ready_at="2026-12-07T04:02:00+00:00",
        warmer_pid=31337, lead_s=600, detail="warm")
    assert rec.to_json() == (DATA / "successor.json").read_text()
    small = read_successor(DATA / "successor_minimal.json")
    assert small == SuccessorRecord(job_id="9", job_name="n", predecessor="8")
    assert small.to_json() == (DATA / "successor_minimal.json").read_text()


@pytest.mark.parametrize(("change", "want"), [
    ({"warmer_pid": 0, "lead_s": -1, "detail": 5, "ready_at": None},
     {"warmer_pid": None, "lead_s": None, "detail": "", "ready_at": ""}),
    ({"warmer_pid": True, "lead_s": "600"}, {"warmer_pid": None, "lead_s": None}),
])
def test_a_successor_record_drops_its_bad_hints(change: dict[str, object],
                                                want: dict[str, object]) -> None:
    data = json.loads((DATA / "successor.json").read_text())
    data.update(change)
    rec = SuccessorRecord.from_json(json.dumps(data))
    assert rec is not None
    assert {k: getattr(rec, k) for k in want} == want


@pytest.mark.parametrize("change", [{"job_id": "x1"}, {"job_id": ""}, {"job_name": 3},
                                    {"phase": "gone"}, {"predecessor": None}])
def test_a_bad_successor_record_is_none(change: dict[str, object]) -> None:
    data = json.loads((DATA / "successor.json").read_text())
    data.update(change)
    assert SuccessorRecord.from_json(json.dumps(data)) is None


def test_a_saved_report_with_a_bad_report_is_none() -> None:
    data = json.loads((DATA / "saved_report.json").read_text())
    data["report"]["status"] = "GREAT"
    assert SavedReport.from_dict(data) is None


def test_a_run_whose_owner_record_is_bad_is_refused_naming_the_file_and_field(
        tmp_path: Path) -> None:
    """``status``/``logs``/``wait`` of a run whose only file is a bad owner record said
    "no run" (as for an id never used); now the file and the field are named."""
    from slurm_fsm.detach import find
    from slurm_fsm.errors import UnknownRun

    files = RunFiles(tmp_path / "work_dirs" / ".slurm_alloc.json")
    path = files.owner_path(RUN)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads((DATA / "owner_record.json").read_text())
    data["pid"] = "many"
    path.write_text(json.dumps(data))
    os.chmod(path, 0o600)
    with pytest.raises(UnknownRun) as caught:
        find(tmp_path, RUN)
    assert str(path) in str(caught.value) and "pid: must be an integer" in str(caught.value)
