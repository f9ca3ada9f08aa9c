"""The fake cluster's GPU ledger: a script's srun takes GPUs, waits while they are
taken, and gets CUDA_VISIBLE_DEVICES per step, as on the real cluster."""

from __future__ import annotations

import subprocess
from pathlib import Path

from slurm_fsm import Executor, FakeCluster, Status
from slurm_fsm.events import Events

from conftest import SpecFactory


class Recorder(Events):
    def __init__(self) -> None:
        self.messages: list[str] = []

    def message(self, text: str) -> None:
        self.messages.append(text)


def _allocation(make_spec: SpecFactory, fake: FakeCluster) -> str:
    big = make_spec(workflow_type="custom", slurm_params={"gpus_per_node": 4})
    report = Executor(big, fake).run()
    assert report.status is Status.PASSED, report.render_text()
    assert report.allocation_id is not None
    return report.allocation_id


def _steps(fake: FakeCluster, job_id: str, n: int, body: str) -> list[subprocess.Popen[str]]:
    env = {**fake.srun_env(job_id), "SLURM_EXACT": "1", "SLURM_GPUS_PER_NODE": "1"}
    return [subprocess.Popen(["srun", "-N", "1", "-n", "1", "bash", "-c", body], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(n)]


def test_five_one_gpu_steps_on_four_gpus_one_waits(make_spec: SpecFactory) -> None:
    fake = FakeCluster(run_scripts=True, gpus_per_node=4)
    job = _allocation(make_spec, fake)
    procs = _steps(fake, job, 5, 'echo "cvd=$CUDA_VISIBLE_DEVICES"; sleep 1')
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert {o.strip() for o, _ in outs} == {f"cvd={i}" for i in range(4)}
    waited = [e for _, e in outs if "step creation temporarily disabled" in e]
    assert len(waited) == 1 and "Step created for job" in waited[0]
    assert fake.gpus_in_use() == {}  # every GPU given back


def test_a_job_beside_siblings_gets_the_free_gpu_and_ignores_their_processes(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    fake = FakeCluster(run_scripts=True, gpus_per_node=4)
    job = _allocation(make_spec, fake)
    pids = tmp_path / "pids"
    pids.mkdir()
    siblings = _steps(fake, job, 3, f'echo "$$" > {pids}/.$CUDA_VISIBLE_DEVICES && '
                      f'mv {pids}/.$CUDA_VISIBLE_DEVICES {pids}/$CUDA_VISIBLE_DEVICES; sleep 6')
    try:
        deadline = 0
        # each file appears whole (written aside, then renamed): a file seen is never empty
        while len([f for f in pids.iterdir() if not f.name.startswith(".")]) < 3 \
                and deadline < 600:
            subprocess.run(["sleep", "0.05"], check=True)
            deadline += 1
        held = {int(f.name): int(f.read_text()) for f in pids.iterdir()
                if not f.name.startswith(".")}
        free = ({0, 1, 2, 3} - set(held)).pop()
        assert set(fake.gpus_in_use()["node01"]) == set(held)
        for pid in held.values():
            fake.add_gpu_process("node01", pid, "python3", "20000 MiB")
        fake.add_gpu_process("node01", 4242, "/usr/bin/ollama", "5012 MiB")
        script = tmp_path / "one.slurm"
        script.write_text("#!/bin/bash\nsrun bash -c 'echo \"cvd=$CUDA_VISIBLE_DEVICES\"'\n")
        one = make_spec(workflow_type="custom", script_path=str(script),
                        slurm_params={"gpus_per_node": 1})
        r = Executor(one, fake).run()
        assert r.status is Status.PASSED, r.render_text()
        assert f"cvd={free}" in r.log_tail
        gpu = [w for w in r.warnings if "GPU processes" in w]
        assert len(gpu) == 1 and "4242" in gpu[0]
        assert all(str(p) not in gpu[0] for p in held.values())
    finally:
        for p in siblings:
            p.communicate(timeout=30)


def test_a_job_waits_while_siblings_hold_every_gpu(make_spec: SpecFactory,
                                                   tmp_path: Path) -> None:
    fake = FakeCluster(run_scripts=True, gpus_per_node=4)
    job = _allocation(make_spec, fake)
    siblings = _steps(fake, job, 4, "sleep 2")
    try:
        while len(fake.gpus_in_use().get("node01", {})) < 4:
            subprocess.run(["sleep", "0.05"], check=True)
        script = tmp_path / "one.slurm"
        script.write_text("#!/bin/bash\nsrun bash -c 'echo \"cvd=$CUDA_VISIBLE_DEVICES\"'\n")
        one = make_spec(workflow_type="custom", script_path=str(script),
                        slurm_params={"gpus_per_node": 1})
        events = Recorder()
        r = Executor(one, fake, events=events).run()
        assert r.status is Status.PASSED, r.render_text()
        assert any(m.startswith("waiting for GPUs") for m in events.messages), events.messages
        assert any(m.startswith("step started after waiting") for m in events.messages)
    finally:
        for p in siblings:
            p.communicate(timeout=30)
