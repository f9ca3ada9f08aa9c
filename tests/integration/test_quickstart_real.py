"""The README's quick start, as typed, in a fresh ``bash -l`` with a clean environment,
against the local cluster (which ``make demo`` leaves running)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from slurm_fsm_dev.localcluster import ClusterInfo

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _block(after: str, lang: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(after)
    match = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, start)
    assert match, f"no ```{lang} block after {after!r} in README.md"
    return match.group(1)


def _fresh_bash(script: str) -> subprocess.CompletedProcess[str]:
    """A login bash with nothing of this process' environment but HOME, a plain PATH and
    which local cluster is ours (SLURM_FSM_LOCAL_DIR): no SLURM_CONF, no venv."""
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": CLEAN_PATH}
    if os.environ.get("SLURM_FSM_LOCAL_DIR"):
        env["SLURM_FSM_LOCAL_DIR"] = os.environ["SLURM_FSM_LOCAL_DIR"]
    return subprocess.run(["bash", "-lc", "set -e\n" + script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_readme_quick_start_works_as_typed_in_a_new_shell(local_cluster: ClusterInfo) -> None:
    block = _block("<!-- quickstart", "sh")
    proc = _fresh_bash(block)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert '"status": "PASSED"' in proc.stdout
    assert "RELEASED" in proc.stdout or "released" in proc.stdout.lower()
    assert "stateDiagram" in proc.stdout or "digraph" in proc.stdout


def test_readme_python_example_works_in_a_new_shell(local_cluster: ClusterInfo) -> None:
    setup = "\n".join(line for line in _block("<!-- quickstart", "sh").splitlines()[:2])
    python = _block("## What it is", "python")
    proc = _fresh_bash(f"{setup}\npython - <<'EOF'\n{python}EOF\n"
                       "slurm-fsm release examples/pytest/job_spec.json\n")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("PASSED ")


def test_demo_shows_the_commands_of_both_runs_and_how_to_go_on(
        local_cluster: ClusterInfo, tmp_path: Path) -> None:
    import sys

    proc = subprocess.run([sys.executable, "-m", "slurm_fsm", "demo", "-q"], cwd=tmp_path,
                          env=dict(os.environ), capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    table = out[out.index("the Slurm commands each run issued"):]
    header = table.splitlines()[1]
    first, second = (int(n) for n in re.findall(r"run \d \((\d+) commands\)", header))
    assert second < first
    skipped = out[out.index("it did not run: "):].splitlines()[0]
    assert "salloc" in skipped  # the saving, named
    assert "salloc --no-shell" in table.split("\n", 2)[2]  # the first run's salloc, shown
    assert f"left running: the local Slurm cluster (SLURM_CONF={local_cluster.slurm_conf})" \
        in out
    assert f"export SLURM_CONF={local_cluster.slurm_conf}" in out
    assert "make cluster-down" in out and "make docs" in out
