"""The ``scancel`` shim of a persistent run's script (issue 25, item 1): a script that
cancels "its own job" cancels this run's steps, never the shared allocation."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurm_fsm import scancelshim
from slurm_fsm.backend import JobInfo, ScriptRequest
from slurm_fsm.placement import script_env
from slurm_fsm.scancelshim import ALLOCATION_ENV, own_steps, plan
from slurm_fsm.spec import SlurmParams
from slurm_fsm.subprocess_backend import SubprocessBackend


@pytest.mark.parametrize(("args", "options"), [
    (["7"], []), (["--signal=USR1", "7"], ["--signal=USR1"]),
    (["-s", "KILL", "7"], ["--signal=KILL"]), (["-sTERM", "7"], ["--signal=TERM"]),
    (["-Q", "7"], ["--quiet"]), (["--", "7"], [])])
def test_the_allocation_id_becomes_this_runs_steps_options_kept(
        args: list[str], options: list[str]) -> None:
    """Options are kept, written out in full for the real scancel (issue 43, item 2)."""
    p = plan(args, "7", ["2", "4"])
    assert p.argv == [*options, "7.2", "7.4"]
    assert "shared allocation" in p.message


def test_no_step_of_this_run_left_cancels_nothing_and_exits_0() -> None:
    p = plan(["7"], "7", [])
    assert p.argv is None and p.status == 0
    assert "nothing to cancel" in p.message


def test_other_ids_and_this_runs_explicit_steps_pass_through() -> None:
    assert plan(["8", "7.3"], "7", ["3"]).argv == ["8", "7.3"]
    assert plan(["8", "7.3"], "7", ["2"]).argv is None  # a sibling's step: refused
    assert plan(["7", "8"], "7", ["1"]).argv == ["8", "7.1"]
    assert plan(["7"], "", None).argv == ["7"]  # not in a persistent run: unchanged


@pytest.mark.parametrize("args", [["-u", "root"], ["--me"], ["--name=x"], ["-n", "x"],
                                  ["--user", "root", "--state=RUNNING"]])
def test_filters_without_ids_are_refused_they_would_select_the_allocation(
        args: list[str]) -> None:
    p = plan(args, "7", None)
    assert p.argv is None and p.status == 1
    assert "refused" in p.message and "7" in p.message


def test_batch_on_the_allocation_is_refused() -> None:
    p = plan(["--batch", "7"], "7", ["1"])
    assert p.argv is None and p.status == 1 and "--batch" in p.message
    assert plan(["-b", "--signal=USR1", "7"], "7", ["1"]).argv is None


def test_own_steps_are_those_whose_srun_runs_here_in_the_scripts_group() -> None:
    out = ("StepId=7.0 UserId=0 StepName=sleep SrunHost:Pid=h1:100 Tres=cpu=1\n"
           "StepId=7.1 UserId=0 StepName=sleep SrunHost:Pid=h1:200 Tres=cpu=1\n"
           "StepId=7.2 UserId=0 StepName=sleep SrunHost:Pid=h2:100 Tres=cpu=1\n"
           "StepId=7.extern UserId=0 StepName=extern SrunHost:Pid=h1:100\n"
           "StepId=8.0 UserId=0 StepName=x SrunHost:Pid=h1:100\n")
    groups = {100: 55, 200: 66}
    assert own_steps(out, "7", "h1", 55, groups.get) == ["0"]
    assert own_steps(out, "7", "h1", 66, groups.get) == ["1"]
    assert own_steps("", "7", "h1", 55, groups.get) == []


def test_script_env_names_the_allocation_for_the_shim() -> None:
    env = script_env(JobInfo(job_id="42", state="RUNNING", nodelist="n1"),
                     SlurmParams(partition="p", account="a", nodes=1))
    assert env[ALLOCATION_ENV] == "42" == env["SLURM_JOB_ID"]


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def test_a_script_run_by_the_real_backend_finds_the_shim_first_on_path(
        tmp_path: Path) -> None:
    """End to end without Slurm: ``bash script`` as the persistent path starts it, with
    stand-ins for scontrol (one step of the script's group, one of another) and
    scancel (records what it was asked)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "asked"
    _tool(bin_dir, "scancel", f'echo "$@" >> {asked}')
    # step 3's srun is the script's own bash ($PPID of the shim's python is the shim
    # file's exec, whose parent is bash): report the caller's pgid member pid
    _tool(bin_dir, "scontrol", 'echo "StepId=42.3 SrunHost:Pid=$(hostname):$SCRIPT_PID"; '
          'echo "StepId=42.5 SrunHost:Pid=$(hostname):1"')
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\nexport SCRIPT_PID=$$\nscancel ${SLURM_JOB_ID}\n"
                      "scancel --signal=USR1 $SLURM_JOBID\necho after $?\n")
    backend = SubprocessBackend(env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    env = script_env(JobInfo(job_id="42", state="RUNNING", nodelist="n1"),
                     SlurmParams(partition="p", account="a", nodes=1))
    run = backend.start_script(ScriptRequest(script_path=script, log_path=tmp_path / "log",
                                             env=env, cwd=tmp_path))
    deadline = 30.0
    while run.poll() is None and deadline > 0:
        subprocess.run(["sleep", "0.1"], check=True)
        deadline -= 0.1
    assert run.poll() == 0
    log = (tmp_path / "log").read_text()
    assert asked.read_text().splitlines() == ["42.3", "--signal=USR1 42.3"], log
    assert "after 0" in log
    assert "this run's steps 42.3" in log


def test_the_shim_file_runs_this_module_and_lives_in_a_private_directory(
        tmp_path: Path) -> None:
    where = scancelshim.shim_dir(tmp_path)
    assert (where / "scancel").read_text() == scancelshim.shim_text()
    assert os.access(where / "scancel", os.X_OK)
    assert scancelshim.shim_dir(tmp_path) == where  # the same for every run
    assert (where.parent.stat().st_mode & 0o777) == 0o700


@pytest.mark.parametrize("planted", ["open", "link", "file"])
def test_a_planted_directory_is_not_used_a_private_one_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str) -> None:
    """Issue 43 item 6: whoever makes ``slurm_fsm-<uid>`` first (a folder open to
    others, a link, a file) does not turn the shim off: the shims go into a fresh
    private folder (``mkdtemp``), never into the planted one, and no exported bash
    function stands in for them (``/bin/sh`` and ``env`` drop those)."""
    top = tmp_path / f"slurm_fsm-{os.getuid()}"
    if planted == "open":
        top.mkdir(mode=0o777)
        top.chmod(0o777)
    elif planted == "link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        top.symlink_to(tmp_path / "elsewhere")
    else:
        top.write_text("")
    where = scancelshim.shim_dir(tmp_path)
    assert top not in where.parents and tmp_path / "elsewhere" not in where.parents
    assert where.parent.parent == tmp_path
    assert (where.parent.stat().st_mode & 0o777) == 0o700
    assert where.parent.stat().st_uid == os.getuid()
    assert (where / "scancel").read_text() == scancelshim.shim_text()
    assert scancelshim.shim_dir(tmp_path) == where  # one place for the process's runs
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    env = scancelshim.shim_env("/usr/bin")
    assert env["PATH"] == f"{where}{os.pathsep}/usr/bin"
    assert not any(k.startswith("BASH_FUNC_") for k in env)


def test_no_private_place_at_all_refuses_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nowhere private to put the shims: an error naming the folder, never a script
    run without them."""
    (tmp_path / f"slurm_fsm-{os.getuid()}").write_text("")
    monkeypatch.setattr(scancelshim.tempfile, "mkdtemp",
                        lambda **kw: (_ for _ in ()).throw(PermissionError(13, "denied")))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(OSError, match="no private folder for the scancel shim"):
        scancelshim.shim_env("/usr/bin")


# ------------------------------------------------------- jobs the script submits itself


@pytest.mark.parametrize("tool", ["salloc", "sbatch"])
def test_a_job_the_script_submits_gets_none_of_the_runs_placement(
        tmp_path: Path, tool: str) -> None:
    """Issue 44 item 5: what the persistent path exports is for this run's own steps.
    ``salloc``/``sbatch`` run by the script (stand-ins printing their environment) get
    the script's environment without it: no SRUN_CPUS_PER_TASK, SLURM_GPUS_PER_NODE,
    SLURM_EXACT, allocation id; the script's own variables are kept."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, tool, 'echo "args=$*"; env | grep -E "^(SLURM|SRUN|MINE)" | sort')
    script = tmp_path / "job.slurm"
    script.write_text(f"#!/bin/bash\nexport MINE=1\n{tool} -N1 'a b'\n"
                      'echo "own=$SRUN_CPUS_PER_TASK,$SLURM_GPUS_PER_NODE"\n')
    backend = SubprocessBackend(env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    env = script_env(JobInfo(job_id="42", state="RUNNING", nodelist="n1"),
                     SlurmParams(partition="p", account="a", nodes=1, gpus_per_node=1,
                                 cpus_per_task=2))
    assert env["SRUN_CPUS_PER_TASK"] == "2" and env["SLURM_GPUS_PER_NODE"] == "1"
    run = backend.start_script(ScriptRequest(script_path=script, log_path=tmp_path / "log",
                                             env=env, cwd=tmp_path))
    deadline = 30.0
    while run.poll() is None and deadline > 0:
        subprocess.run(["sleep", "0.1"], check=True)
        deadline -= 0.1
    log = (tmp_path / "log").read_text()
    assert run.poll() == 0, log
    assert "args=-N1 a b" in log
    submitted = log.split("args=", 1)[1].split("own=", 1)[0]
    assert "MINE=1" in submitted
    assert [line for line in submitted.splitlines()[1:]
            if not line.startswith(("MINE=", "SLURM_CONF=", "SLURM_FSM_GUARD_TOKEN="))
            ] == [], log
    assert "own=2,1" in log  # the script itself keeps its share


@pytest.mark.parametrize(("args", "env", "options"), [
    (["--cron", "7"], {}, ["--cron"]), (["-c", "7"], {}, ["--cron"]),
    (["--admin-comment=why", "7"], {}, ["--admin-comment=why"]),
    (["--admin-comment", "why", "7"], {}, ["--admin-comment=why"]),
    (["7"], {"SCANCEL_CRON": "1"}, None)])
def test_slurm_26_05s_new_options_change_no_target(
        args: list[str], env: dict[str, str], options: list[str] | None) -> None:
    """Slurm 26.05's scancel adds ``-c, --cron`` (confirm the cancel of a scrontab job)
    and ``--admin-comment=comment`` (set the job's AdminComment; admins only): neither
    selects jobs, so the allocation still becomes this run's steps (issue 44: the real
    shim test failed on 26.05 with both unknown, hence refused)."""
    p = plan(args, "7", ["2"], env=env)
    assert p.argv is not None and p.argv[-1] == "7.2", p
    if options is not None:
        assert p.argv[:-1] == options
