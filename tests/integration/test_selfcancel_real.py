"""A script that cancels "its own job" in persistent mode (issue 25, item 1).

TensorRT-LLM's ``disaggr_torch.slurm`` starts its servers with ``srun ... &``, runs the
benchmark client, and ends with ``scancel ${SLURM_JOB_ID}`` (and calls it from its
``cleanup_on_failure`` before ``exit 1``). Under ``bash <script>`` in a shared
allocation that id is the allocation: the ``scancel`` shim first on the script's PATH
(:mod:`slurm_fsm.scancelshim`) turns it into this run's own steps.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, cli_report, job_state, spec_dict, step_ids, steps, until

pytestmark = pytest.mark.slurm

#: the sibling: one step that outlives the other run's scancel
SIBLING = ("#!/bin/bash\nsrun --overlap -n1 bash -c 'until [ -e {go} ]; do sleep 0.2; done; "
           "sleep 1'\necho sibling end\n")
#: disaggr_torch.slurm's shape: a server in the background, a client, scancel of "its job"
SELF_CANCEL = """#!/bin/bash
set -euo pipefail
cleanup_on_failure() {{
    echo "Error: $1"
    scancel ${{SLURM_JOB_ID}}
    exit 1
}}
srun --overlap -n1 sleep 300 &
srun --overlap -n1 true || cleanup_on_failure "client failed"
{fail}
echo "Job completed successfully"
# try to kill the server and workers
scancel ${{SLURM_JOB_ID}}
touch {go}
"""


def _env(cluster: ClusterInfo) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}


def _start(cluster: ClusterInfo, spec: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run", str(spec), "--json",
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(cluster))




def _spec(cluster: ClusterInfo, tmp_path: Path, name: str, which: str, script: str,
          success: str) -> Path:
    path = tmp_path / f"{which}.slurm"
    path.write_text(script)
    data = spec_dict(cluster, tmp_path, name, script_path=str(path),
                     work_dir=str(tmp_path / f"work-{which}"), success_patterns=[success])
    spec = tmp_path / f"{which}.json"
    spec.write_text(json.dumps(data))
    return spec


@pytest.mark.parametrize("fail", [False, True], ids=["at-the-end", "cleanup-on-failure"])
def test_a_self_cancelling_script_cancels_its_own_steps_and_its_sibling_passes(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, fail: bool) -> None:
    name = names.new("selfcancel")
    go = tmp_path / "go"
    sibling = _spec(local_cluster, tmp_path, name, "sibling",
                    SIBLING.format(go=go), "sibling end")
    fail_line = (f'touch {go}; cleanup_on_failure "benchmark failed"' if fail else "")
    own = _spec(local_cluster, tmp_path, name, "self",
                SELF_CANCEL.format(go=go, fail=fail_line), "Job completed successfully")
    try:
        first = _start(local_cluster, sibling)
        work_dirs = tmp_path / "repo" / "work_dirs"
        until("the sibling's step running", lambda: True if any(
            '"pgid"' in p.read_text() for p in work_dirs.glob(".slurm_run.r????????????.json"))
            else None, 120)
        alloc = json.loads((work_dirs / ".slurm_alloc.json").read_text())["job_id"]
        until("the sibling's step on the allocation",
              lambda: True if any(not n.startswith("fsm-lease.")  # not its lease
                                  for n in steps(alloc).values()) else None, 60)
        second = _start(local_cluster, own)
        mine = cli_report(second)
        theirs = cli_report(first)
        # the sibling ran to its end in the same allocation, which is still there
        assert (theirs["_rc"], theirs["status"]) == (0, "PASSED"), theirs
        assert theirs["allocation_id"] == mine["allocation_id"] == alloc
        assert job_state(alloc) == "RUNNING"
        assert step_ids(alloc) == []  # the background server was cancelled
        log = Path(mine["log_files"]["stdout"]).read_text()
        assert f"scancel {alloc} -> this run's steps {alloc}." in log, log
        if fail:  # cleanup_on_failure: its exit 1 is the verdict, not a cancel
            assert (mine["_rc"], mine["status"]) == (1, "FAILED"), mine
        else:
            assert (mine["_rc"], mine["status"]) == (0, "PASSED"), mine
        # the next run still finds the allocation and reuses it
        again = cli_report(_start(local_cluster, sibling), 120)
        assert again["status"] == "PASSED", again
        assert again["allocation_id"] == alloc
    finally:
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(sibling),
                        "--quiet"], env=_env(local_cluster), timeout=120, check=False,
                       capture_output=True)


#: issue 43, item 2: every disguise of "cancel the allocation" the fourth campaign found,
#: run by a persistent script while a sibling job runs in the same allocation
DISGUISES = """#!/bin/bash
scancel --acc=acct
scancel --part debug
scancel --stat=RUNNING
scancel --nodel=n1,n2,n3
scancel 0$SLURM_JOB_ID
scancel $SLURM_JOB_ID,$SLURM_JOB_ID
SCANCEL_STATE=RUNNING scancel
SCANCEL_USER=$(id -un) scancel
touch {go}
echo disguises done
"""


def test_disguised_scancels_cancel_neither_the_allocation_nor_its_sibling(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("disguise")
    go = tmp_path / "go"
    sibling = _spec(local_cluster, tmp_path, name, "sibling", SIBLING.format(go=go),
                    "sibling end")
    own = _spec(local_cluster, tmp_path, name, "disguise", DISGUISES.format(go=go),
                "disguises done")
    try:
        first = _start(local_cluster, sibling)
        work_dirs = tmp_path / "repo" / "work_dirs"
        until("the sibling's step running", lambda: True if any(
            '"pgid"' in p.read_text() for p in work_dirs.glob(".slurm_run.r????????????.json"))
            else None, 120)
        alloc = json.loads((work_dirs / ".slurm_alloc.json").read_text())["job_id"]
        until("the sibling's step on the allocation",
              lambda: True if any(not n.startswith("fsm-lease.")
                                  for n in steps(alloc).values()) else None, 60)
        mine = cli_report(_start(local_cluster, own))
        theirs = cli_report(first)
        assert (theirs["_rc"], theirs["status"]) == (0, "PASSED"), theirs
        assert (mine["_rc"], mine["status"]) == (0, "PASSED"), mine
        assert job_state(alloc) == "RUNNING"
        log = Path(mine["log_files"]["stdout"]).read_text()
        assert log.count("slurm_fsm: refused `scancel") == 6, log
        # 0$SLURM_JOB_ID and the list: this run's steps (none left), never the allocation
        assert log.count(f"scancel {alloc}: no step of this run") == 2, log
    finally:
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(sibling),
                        "--quiet"], env=_env(local_cluster), timeout=120, check=False,
                       capture_output=True)


def test_the_shim_knows_every_option_of_this_clusters_scancel(
        local_cluster: ClusterInfo) -> None:
    """The shim refuses an option it does not know; this tells when a Slurm version adds
    one (so that its kind is decided, not refused by accident)."""
    from slurm_fsm.scancelshim import OPTIONS

    done = subprocess.run(["scancel", "--help"], capture_output=True, text=True,
                          timeout=60, env=_env(local_cluster), check=False)
    listed = set(re.findall(r"--([a-z][a-z-]*)", done.stdout + done.stderr))
    assert len(listed) > 15, done
    assert listed - set(OPTIONS) == set()
