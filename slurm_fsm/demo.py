"""``slurm-fsm demo``: the main job of the README.

Runs the example pytest-style job twice through one persistent allocation on the
Slurm this machine is configured for (``SLURM_CONF`` or ``/etc/slurm/slurm.conf``),
prints both reports and how long each took (the second shows the reuse:
``Validating -> Ready``, no ``salloc``), then releases the allocation. Where no
Slurm is configured it says so and runs on the fake cluster instead, clearly
labelled. ``make demo`` starts the project's local cluster first (that is
development tooling, not part of the package). The example job ships inside the
package, so the demo works from an installed wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import attrs

from slurm_fsm.backend import SlurmBackend
from slurm_fsm.clock import Clock
from slurm_fsm.executor import Executor
from slurm_fsm.progress import StderrEvents
from slurm_fsm.report import Report
from slurm_fsm.spec import JobSpec

__all__ = ["run_demo"]



def _example_dir() -> Path:
    """The example job: packaged in the wheel (``slurm_fsm/_examples/pytest``), or the
    repository's ``examples/pytest`` when running from a source tree."""
    here = Path(__file__).resolve().parent
    packaged = here / "_examples" / "pytest"
    return packaged if packaged.is_dir() else here.parent / "examples" / "pytest"


EXAMPLE = _example_dir()
DEMO_ROOT = Path("work_dirs") / "demo"


def _say(text: str) -> None:
    print(text, flush=True)


def _slurm_configured() -> bool:
    return bool(os.environ.get("SLURM_CONF")) or Path("/etc/slurm/slurm.conf").exists()


def _real_backend() -> tuple[SlurmBackend | None, str, str, str]:
    """The real backend over the configured Slurm, or None when none is configured."""
    from slurm_fsm.subprocess_backend import SubprocessBackend

    if not _slurm_configured():
        _say("[demo] no Slurm configured here (SLURM_CONF unset, no /etc/slurm/slurm.conf); "
             "`make demo` starts the project's local cluster first")
        return None, "", "", ""
    label = f"this machine's Slurm (SLURM_CONF={os.environ.get('SLURM_CONF', '/etc/slurm')})"
    return SubprocessBackend(), label, os.environ.get("SLURM_FSM_DEMO_PARTITION", "debug"), \
        os.environ.get("SLURM_FSM_DEMO_ACCOUNT", "acct")


def _spec(root: Path, partition: str, account: str, release: bool = False) -> JobSpec:
    script = root / "job.slurm"
    if not script.exists():
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy2(EXAMPLE / "job.slurm", script)
    base = JobSpec.from_file(EXAMPLE / "job_spec.json")
    params = attrs.evolve(base.slurm_params, partition=partition, account=account)
    spec = attrs.evolve(base, script_path=script, work_dir=root / "work", repo_root=root,
                        slurm_params=params, release_allocation=release,
                        alloc_job_name=f"{account}-slurm_fsm-demo.persistent")
    if not release:
        (root / "job_spec.json").write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
    return spec


def run_demo(*, fake: bool = False, keep: bool = False, quiet: bool = False) -> int:
    clock: Clock | None = None
    backend: SlurmBackend | None = None
    partition, account = "debug", "acct"
    if not fake:
        backend, label, real_partition, real_account = _real_backend()
        if backend is not None:
            partition, account = real_partition, real_account
    if backend is None:
        from slurm_fsm.testing import FakeCluster, FakeScript

        fc = FakeCluster(partitions={"debug": ["n1", "n2"]}, accounts=["acct"])
        fc.script("job.slurm", FakeScript(lines=(
            "tests/test_model.py::test_forward PASSED",
            "=================== 2 passed, 1 skipped in 0.12s ===================")))
        backend, clock = fc, fc.clock
        label = "THE FAKE CLUSTER (in memory; no real Slurm job runs)"
    root = (DEMO_ROOT / ("fake" if clock is not None else "real")).resolve()
    _say(f"[demo] running on {label}")
    _say(f"[demo] repo root {root}; state file {root / 'work_dirs' / '.slurm_alloc.json'}")
    spec = _spec(root, partition, account)
    reports: list[tuple[Report, float]] = []
    code = 0
    for n in (1, 2):
        _say(f"\n[demo] run {n} of 2: slurm-fsm run (persistent allocation)")
        events = StderrEvents(quiet=quiet, stream_output=True)
        t0 = time.monotonic()
        report = Executor(spec, backend, clock=clock, events=events).run()
        took = time.monotonic() - t0
        events.close()
        reports.append((report, took))
        sys.stdout.write(report.render_text().rstrip("\n") + "\n")
        _say(f"  path:        {' -> '.join(report.path)}")
        _say(f"  took:        {took:.3f} s")
        code = code or report.exit_code_for_cli
    if len(reports) == 2:
        (r1, t1), (r2, t2) = reports
        reused = r1.allocation_id == r2.allocation_id and "Allocating" not in r2.path
        _say(f"\n[demo] first run {t1:.3f} s, second run {t2:.3f} s: "
             + (f"the second reused allocation {r2.allocation_id} (no salloc, no import, "
                "no install)" if reused else "the second did NOT reuse the allocation"))
        if not reused:
            code = code or 1
    if keep:
        _say(f"[demo] allocation kept (--keep); release it with: slurm-fsm release "
             f"{root / 'job_spec.json'}")
    else:
        rel = Executor(_spec(root, partition, account, release=True), backend,
                       clock=clock).run()
        _say(f"\n[demo] {rel.summary}")
        code = code or rel.exit_code_for_cli
    return code
