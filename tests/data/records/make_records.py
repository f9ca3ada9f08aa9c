"""Writes the record files of tests/test_record_formats.py with the code of the day.

Run once, before the records moved to the converter (issue 40 item 5), so that the
files here are what the previous version wrote; they must keep loading. Not run by
the tests: rerunning it after a format change would hide the change.
"""

from __future__ import annotations

from pathlib import Path

from slurm_fsm.history import RunEntry
from slurm_fsm.report import Report, Status
from slurm_fsm.runowner import Owner, OwnerRecord, RunPhase, SavedReport
from slurm_fsm.runrecord import RunRecord, StepMark
from slurm_fsm.successor import Phase, SuccessorRecord

HERE = Path(__file__).parent


def main() -> None:
    mark = StepMark(step_id="3", name="bash", srun_host="login1", srun_pid=4242,
                    start_time="2026-12-07T04:00:01")
    run = RunRecord(run_id="r0123456789ab", allocation="1234", pid=999, pid_ticks=123456,
                    host="login1", boot_id="b0d1e2f3", uid=1000,
                    since="2026-12-07T04:00:00+00:00", spec="job_spec.json", model="m1",
                    container="slurm_fsm_c", log="/w/m1.log",
                    script={"pgid": 777, "token": "t0k3n", "fake_step": "2",
                            "fake_job": "1234"},
                    steps=(mark, StepMark(step_id="4+1")), srun_pids=(4242, 4343),
                    ended=True, seen_steps=("3", "4+1"), lease="slurm_fsm_lease_r0123456789ab")
    (HERE / "run_record.json").write_bytes(run.to_json())
    small = RunRecord(run_id="r00000000000f", allocation="77", pid=1, pid_ticks=2,
                      host="h", boot_id="b", uid=0, since="2026-12-07T04:00:00+00:00")
    (HERE / "run_record_minimal.json").write_bytes(small.to_json())
    owner = OwnerRecord(run_id="r0123456789ab", owner=Owner.SUPERVISOR, pid=999,
                        pid_ticks=123456, host="login1", boot_id="b0d1e2f3", uid=1000,
                        since="2026-12-07T04:00:00+00:00", mode="persistent",
                        spec_path="/w/job_spec.json", spec={"model_name": "m1", "nodes": 1},
                        phase=RunPhase.ENDED, log="/w/m1.log", job_id="",
                        allocation_id="1234", progress="/w/.progress", lease="lease1",
                        exit_code=0)
    (HERE / "owner_record.json").write_bytes(owner.to_json())
    report = Report(status=Status.PASSED, task_type="pytest", mode="persistent",
                    allocation_id="1234", exit_code=0, elapsed_s=1.5, summary="ok",
                    timings={"run_s": 1.5})
    saved = SavedReport(run_id="r0123456789ab", report=report, source="rebuilt",
                        saved_at="2026-12-07T04:01:00+00:00", spec_path="/w/job_spec.json")
    (HERE / "saved_report.json").write_bytes(saved.to_json())
    entries = [RunEntry(key="k1", at="2026-12-07T04:00:00+00:00", status="PASSED",
                        mode="persistent", run_s=1.5, allocation="1234", queue_wait_s=2.0,
                        import_s=3, install_s=0.25, partition="gpu", nodes=2, image="img"),
               RunEntry(key="k2")]
    (HERE / "history.jsonl").write_text("".join(e.to_json() + "\n" for e in entries))
    succ = SuccessorRecord(job_id="1235", job_name="slurm_fsm_next", predecessor="1234",
                           phase=Phase.READY, requested_at="2026-12-07T04:00:00+00:00",
                           ready_at="2026-12-07T04:02:00+00:00", warmer_pid=31337,
                           lead_s=600, detail="warm")
    (HERE / "successor.json").write_text(succ.to_json())
    (HERE / "successor_minimal.json").write_text(
        SuccessorRecord(job_id="9", job_name="n", predecessor="8").to_json())


if __name__ == "__main__":
    main()
