"""``slurm-fsm demo``: the main job of the README.

Runs the example pytest-style job twice through one persistent allocation on the
Slurm this machine is configured for (``SLURM_CONF`` or ``/etc/slurm/slurm.conf``),
prints both reports, then side by side the Slurm commands each run issued and what
the second did not have to do (``salloc``, an image import, installs), then
releases the allocation and says what is left running and how to go on. On a small
local cluster the seconds hardly differ (salloc is free there); the commands show
the saving. Where no Slurm is configured it says so and runs on the fake cluster
instead, clearly labelled. ``make demo`` starts the project's local cluster first (that is
development tooling, not part of the package). The example job ships inside the
package, so the demo works from an installed wheel.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import attrs

from slurm_fsm.backend import SlurmBackend
from slurm_fsm.clock import Clock
from slurm_fsm.executor import Executor
from slurm_fsm.paths import StatePaths
from slurm_fsm.preflight import slurm_config_problem
from slurm_fsm.progress import StderrEvents
from slurm_fsm.report import Report
from slurm_fsm.spec import JobSpec

__all__ = ["STAND_IN_DIR", "export_line", "run_demo"]



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
    return slurm_config_problem() is None


class _Recorder:
    """The Slurm commands a run issued, in order: every one the real backend starts
    (``SubprocessBackend.on_command``: also ``salloc`` and the lease ``srun`` it leaves
    running), or the fake cluster's calls that stand for one."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    def heard(self, argv: Sequence[str]) -> None:
        self.commands.append(shlex.join(argv))


def _real_backend(recorder: _Recorder) -> tuple[SlurmBackend | None, str, str, str]:
    """The real backend over the configured Slurm, or None when none is configured."""
    from slurm_fsm.subprocess_backend import SubprocessBackend

    if not _slurm_configured():
        _say("[demo] no Slurm configured here (SLURM_CONF unset, no /etc/slurm/slurm.conf); "
             "`make demo` starts the project's local cluster first")
        return None, "", "", ""
    label = f"this machine's Slurm (SLURM_CONF={os.environ.get('SLURM_CONF', '/etc/slurm')})"
    return SubprocessBackend(on_command=recorder.heard), label, \
        os.environ.get("SLURM_FSM_DEMO_PARTITION", "debug"), \
        os.environ.get("SLURM_FSM_DEMO_ACCOUNT", "acct")


def _tool(command: str) -> str:
    return command.split(" ", 1)[0]


def _short(command: str, width: int) -> str:
    return command if len(command) <= width else command[: width - 3] + "..."


def _side_by_side(first: list[str], second: list[str], width: int = 44) -> list[str]:
    lines = [f"  {'run 1 (' + str(len(first)) + ' commands)':<{width}}  "
             f"run 2 ({len(second)} commands)"]
    for i in range(max(len(first), len(second))):
        left = _short(first[i], width) if i < len(first) else ""
        right = _short(second[i], width) if i < len(second) else ""
        lines.append(f"  {left:<{width}}  {right}")
    return lines


def _skipped(first: list[str], second: list[str]) -> list[str]:
    """What the second run did not do, by name."""
    fewer = Counter(_tool(c) for c in first) - Counter(_tool(c) for c in second)
    order = sorted(fewer.items(), key=lambda kv: (kv[0] not in ("salloc", "allocate"), kv[0]))
    return [f"{n} x {tool}" if n > 1 else tool for tool, n in order]


def _fake_commands(backend: object, since: int) -> list[str]:
    """The fake cluster's calls that stand for a Slurm command (not ``current_user``,
    not ``start_script``: the job's own ``bash``), as the real backend counts them."""
    from slurm_fsm.testing.fake import SLURM_COMMAND_OPS

    calls = getattr(backend, "calls", [])
    return [c.op for c in calls[since:] if c.op in SLURM_COMMAND_OPS]


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
    recorder = _Recorder()
    partition, account = "debug", "acct"
    if not fake:
        backend, label, real_partition, real_account = _real_backend(recorder)
        if backend is not None:
            partition, account = real_partition, real_account
    if backend is None:
        from slurm_fsm.testing import FakeCluster, FakeScript

        fc = FakeCluster(partitions={"debug": ["n1", "n2"]}, accounts=["acct"],
                         preflight=True)
        fc.script("job.slurm", FakeScript(lines=(
            "tests/test_model.py::test_forward PASSED",
            "=================== 2 passed, 1 skipped in 0.12s ===================")))
        backend, clock = fc, fc.clock
        label = "THE FAKE CLUSTER (in memory; no real Slurm job runs)"
    root = (DEMO_ROOT / ("fake" if clock is not None else "real")).resolve()
    _say(f"[demo] running on {label}")
    _say(f"[demo] repo root {root}; state file {StatePaths.for_repo(root).state}")
    spec = _spec(root, partition, account)
    reports = [_one_run(n, spec, backend, clock, recorder, quiet=quiet) for n in (1, 2)]
    code = next((r.exit_code_for_cli for r, _, _ in reports if r.exit_code_for_cli), 0)
    if len(reports) == 2 and not _compare(reports, spec, fake=clock is not None):
        code = code or 1
    if keep:
        _say(f"\n[demo] allocation kept (--keep); release it with: slurm-fsm release "
             f"{root / 'job_spec.json'}")
    else:
        rel = Executor(_spec(root, partition, account, release=True), backend,
                       clock=clock).run()
        _say(f"\n[demo] {rel.summary}")
        code = code or rel.exit_code_for_cli
    _ending(fake=clock is not None, kept=keep, spec_path=root / "job_spec.json")
    return code


def _one_run(n: int, spec: JobSpec, backend: SlurmBackend, clock: Clock | None,
             recorder: _Recorder, *, quiet: bool) -> tuple[Report, float, list[str]]:
    """Run ``n`` of the two: its report, its seconds and the Slurm commands (or the fake
    cluster's calls) it issued, each said as it comes."""
    _say(f"\n[demo] run {n} of 2: slurm-fsm run (persistent allocation)")
    events = StderrEvents(quiet=quiet, stream_output=True, report_follows=True)
    since = len(getattr(backend, "calls", []))
    recorder.commands.clear()
    t0 = time.monotonic()
    report = Executor(spec, backend, clock=clock, events=events).run()
    took = time.monotonic() - t0
    events.close()
    commands = (_fake_commands(backend, since) if clock is not None
                else list(recorder.commands))
    sys.stdout.write(report.render_text().rstrip("\n") + "\n")
    _say(f"  path:        {' -> '.join(report.path)}")
    _say(f"  took:        {took:.3f} s")
    return report, took, commands


def _compare(reports: list[tuple[Report, float, list[str]]], spec: JobSpec, *,
             fake: bool) -> bool:
    """Say what each of the two runs issued; whether the second reused the allocation."""
    (r1, t1, c1), (r2, t2, c2) = reports
    reused = r1.allocation_id == r2.allocation_id and "Allocating" not in r2.path
    what = "calls to the fake cluster" if fake else "Slurm commands"
    _say(f"\n[demo] the {what} each run issued (the job's own srun lines not counted):")
    for line in _side_by_side(c1, c2):
        _say(line)
    if reused:
        _say(f"[demo] the second reused allocation {r2.allocation_id}; it did not run: "
             + ", ".join(_skipped(c1, c2) or ["(nothing fewer)"]))
        if spec.docker_image is None:
            _say("[demo] no image import and no install either way: this job asks for "
                 "none (with a docker_image the first run imports and installs, the "
                 "second does neither)")
    else:
        _say("[demo] the second did NOT reuse the allocation")
    _say(f"[demo] seconds: first {t1:.3f}, second {t2:.3f} (on a local cluster salloc "
         "is free; on a busy one the first also waits in the queue)")
    return reused


#: Where the project's local cluster keeps its ``nvidia-smi`` stand-in, beside
#: ``etc/slurm.conf`` (``slurm_fsm_dev.localgpu.bin_dir``).
STAND_IN_DIR = "gpu-bin"


def export_line(conf: str) -> str:
    """The ``export`` that points a new shell at the cluster of ``conf``: ``SLURM_CONF``
    and, for the project's local cluster (``<base>/etc/slurm.conf`` with a
    ``<base>/gpu-bin``), its ``nvidia-smi`` stand-in first on ``PATH``, as
    ``scripts/local-slurm env`` prints it (srun carries the caller's PATH to its
    tasks: without it a job that asks GPUs finds no nvidia-smi)."""
    line = f"export SLURM_CONF={shlex.quote(conf)}"
    stand_in = Path(conf).parent.parent / STAND_IN_DIR
    if Path(conf).parent.name == "etc" and stand_in.is_dir():
        line += f' PATH={shlex.quote(str(stand_in))}:"$PATH"'
    return line


def _ending(*, fake: bool, kept: bool, spec_path: Path) -> None:
    """What is left running and three lines to go on."""
    source_tree = (Path(__file__).resolve().parent.parent / "Makefile").is_file()
    conf = os.environ.get("SLURM_CONF", "")
    if fake:
        _say("\n[demo] nothing is left running (the fake cluster lived in this process).")
    else:
        left = [f"the local Slurm cluster (SLURM_CONF={conf})"] if source_tree and conf else []
        if kept:
            left.append(f"the allocation of {spec_path}")
        _say("\n[demo] left running: " + (", and ".join(left) or "nothing of the demo") + ".")
    _say("[demo] to go on:")
    cli = ".venv/bin/slurm-fsm" if source_tree else "slurm-fsm"
    example = "examples/pytest/job_spec.json" if source_tree else str(spec_path)
    if fake:
        use = f"{cli} run {example} --backend fake"
    else:
        use = f"{export_line(conf or '/etc/slurm/slurm.conf')}; {cli} run {example}"
    _say(f"  use the CLI in this shell:  {use}"
         + ("   (or: source .venv/bin/activate, then slurm-fsm ...)" if source_tree else ""))
    _say("  see the docs:               "
         + ("make docs && python3 -m http.server -d site   (or docs/index.md)"
            if source_tree else "the project's docs/ (index.md)"))
    if source_tree and not fake:
        _say("  stop the cluster:           make cluster-down")
    elif not fake:
        _say("  stop the cluster:           as it was started")
