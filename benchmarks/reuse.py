"""Step 0 of a new allocation: cold against the container the nodes kept (issue 42 item 1).

``python -m benchmarks.reuse`` (needs the local cluster with pyxis: it is brought up when
it is not; ``SLURM_FSM_LOCAL_DIR`` picks its folder) runs, ``--rounds`` times, through the
library (:class:`~slurm_fsm.executor.Executor`, a job ``srun true`` in the container):

- **cold**: a new allocation of every node, an install input changed since the last
  round (a comment line in ``requirements-dev.txt``): the container is imported and
  installed (two ``pip install`` s, the first one ``--install-sleep`` seconds slower);
- **after release**: the allocation released, the same spec again: a new allocation on
  the same nodes, whose container pyxis kept (``container_scope=global``) and whose
  setup key is the spec's: reused, nothing imported or installed.

The image is the local cluster's python image padded with ``--pad-mb`` MB of random
bytes (incompressible: enroot unpacks all of it), built once into the temporary folder.
Recorded per run: ``timings.step0_s`` and its parts (``queue_wait_s``, ``import_s`` or
``reuse_check_s``, ``install_s``), the path, the status. Results go to
``benchmarks/reuse.json``; the medians are printed as a table (docs/benchmarks.md holds
the measured one).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs

from slurm_fsm import JobSpec, SubprocessBackend
from slurm_fsm.executor import Executor
from slurm_fsm_dev import localcluster
from slurm_fsm_dev.localpyxis import make_install_repo

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "reuse.json"
PARTS = ("step0_s", "queue_wait_s", "import_s", "reuse_check_s", "install_s")
TOOL_TIMEOUT_S = 900


def say(text: str) -> None:
    print(f"reuse: {text}", file=sys.stderr, flush=True)


def padded_image(base: Path, folder: Path, pad_mb: int) -> Path:
    """``base`` with ``/opt/pad`` (``pad_mb`` MB of random bytes) added."""
    if pad_mb <= 0:
        return base
    root, image = folder / "rootfs", folder / f"python-pad{pad_mb}.sqsh"
    subprocess.run(["unsquashfs", "-q", "-d", str(root), str(base)], check=True,  # noqa: S603
                   stdout=subprocess.DEVNULL,
                   timeout=TOOL_TIMEOUT_S)
    (root / "opt").mkdir(exist_ok=True)
    with (root / "opt" / "pad").open("wb") as fh:
        for _ in range(pad_mb):
            fh.write(os.urandom(1 << 20))
    subprocess.run(["mksquashfs", str(root), str(image), "-noappend", "-all-root",  # noqa: S603
                    "-quiet", "-no-progress"], check=True, timeout=TOOL_TIMEOUT_S,
                   stdout=subprocess.DEVNULL)
    shutil.rmtree(root)
    return image


def slow_repo(folder: Path, sleep_s: float) -> Path:
    """The tests' install repo whose ``pip install -e .`` takes ``sleep_s`` longer."""
    repo = make_install_repo(folder / "repo")
    backend = repo / "_backend" / "it_backend.py"
    backend.write_text(backend.read_text() + (
        "\n\n_build_editable = build_editable\n\n\n"
        "def build_editable(*args, **kwargs):\n"
        f"    import time\n    time.sleep({sleep_s!r})\n"
        "    return _build_editable(*args, **kwargs)\n"))
    return repo


def run_once(spec: JobSpec, label: str) -> dict[str, Any]:
    report = Executor(spec, SubprocessBackend()).run()
    row: dict[str, Any] = {"label": label, "status": report.status.name,
                           "path": report.path,
                           **{k: round(report.timings[k], 2) for k in PARTS
                              if k in report.timings}}
    if report.status.name != "PASSED":
        row["summary"], row["errors"] = report.summary, report.errors[-5:]
    say(f"{label}: {row}")
    released = Executor(attrs.evolve(spec, release_allocation=True),
                        SubprocessBackend()).run()
    if released.status.name != "RELEASED":
        say(f"release: {released.status.name} {released.summary}")
    return row


def median_row(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rows), 2) for k in PARTS
            if all(k in r for r in rows)}


def table(cold: dict[str, float], warm: dict[str, float], meta: dict[str, Any]) -> str:
    def cell(row: dict[str, float], key: str) -> str:
        return f"{row[key]:.2f}" if key in row else "-"

    lines = [f"| new allocation ({meta['rounds']} rounds, medians, s) | step 0 | salloc | "
             "import | reuse check | install |", "|---|---|---|---|---|---|"]
    for name, row in (("cold (imported, installed)", cold),
                      ("after release, same nodes (reused on node)", warm)):
        lines.append(f"| {name} | " + " | ".join(cell(row, k) for k in PARTS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reuse")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pad-mb", type=int, default=300)
    parser.add_argument("--install-sleep", type=float, default=10.0)
    args = parser.parse_args(argv)
    cluster = localcluster.up()
    os.environ.update(cluster.env)
    if cluster.containers is None:
        say(f"the local cluster has no containers: {cluster.containers_problem}")
        return 1
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-reuse-") as tmp:
        folder = Path(tmp)
        image = padded_image(cluster.containers.images["python"], folder, args.pad_mb)
        repo = slow_repo(folder, args.install_sleep)
        script = folder / "job.slurm"
        name = f"bench-reuse-{os.getpid()}"
        script.write_text(f"#!/bin/bash\nsrun --container-name={name} true\necho done\n")
        spec = JobSpec.from_dict({
            "script_path": str(script), "work_dir": str(folder / "work"),
            "model_name": "bench", "workflow_type": "pytest", "repo_root": str(repo),
            "slurm_params": {"partition": cluster.partition, "account": cluster.account,
                             "nodes": len(cluster.nodes)},
            "alloc_job_name": f"{cluster.account}-{name}.persistent",
            "alloc_time_limit": "00:30:00", "docker_image": str(image),
            "container_name": name, "container_mounts": [f"{repo}:{repo}"],
            "success_patterns": ["done"],
        })
        try:
            for k in range(args.rounds):
                (repo / "requirements-dev.txt").write_text(f"./devtool\n# round {k}\n")
                rows.append(run_once(spec, f"cold {k + 1}"))
                rows.append(run_once(spec, f"after release {k + 1}"))
        finally:
            for d in cluster.containers.state_dir.glob(f"*/*/data/pyxis_{name}"):
                shutil.rmtree(d, ignore_errors=True)
        meta = {"rounds": args.rounds, "pad_mb": args.pad_mb,
                "image_mb": round(image.stat().st_size / 2**20, 1),
                "install_sleep_s": args.install_sleep, "nodes": len(cluster.nodes)}
    cold = median_row([r for r in rows if r["label"].startswith("cold")])
    warm = median_row([r for r in rows if r["label"].startswith("after")])
    RESULTS.write_text(json.dumps({"meta": meta, "runs": rows, "cold": cold,
                                   "after_release": warm}, indent=2) + "\n",
                       encoding="utf-8")
    print(table(cold, warm, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
