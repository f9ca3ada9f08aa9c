"""Step 0 of a new allocation three ways: cold, reused on the node, from the image cache
(issue 42 items 1, 2 and 4).

``python -m benchmarks.imagecache`` (needs the local cluster with pyxis: it is brought up
when it is not; ``SLURM_FSM_LOCAL_DIR`` picks its folder) runs, ``--rounds`` times,
through the library (:class:`~slurm_fsm.executor.Executor`, a job ``srun true`` in the
container), each run in a new allocation of every node (the one before released):

- **cold**: an install input changed since the last round (a comment line in
  ``requirements-dev.txt``): the image is imported, the repo installed (two ``pip
  install`` s, the first ``--install-sleep`` seconds slower), and the installed
  container exported once to the image cache (its own part, ``cache_write_s``);
- **reused on node**: the same spec again: pyxis kept the container on the nodes
  (``container_scope=global``) and its setup key is the spec's: one step, nothing
  imported or installed;
- **from the cache**: the nodes' containers removed first (as on nodes that never held
  it, or under ``container_scope=job``): the container is made from the cache's
  squashfs (``--container-image=<entry>``), nothing of the spec's image imported,
  nothing installed.

The image is the local cluster's python image padded with ``--pad-mb`` MB of random
bytes (incompressible), built once into the temporary folder. Recorded per run: the
path, the status, ``timings.step0_s`` and its parts. Results go to
``benchmarks/imagecache.json`` and the figure to ``docs/img/imagecache.svg``
(:func:`svg`); the medians are printed as a table (docs/benchmarks.md holds the
measured one).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from benchmarks.reuse import padded_image, slow_repo
from slurm_fsm import JobSpec, SubprocessBackend
from slurm_fsm.executor import Executor
from slurm_fsm_dev import localcluster

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "imagecache.json"
FIGURE = REPO / "docs" / "img" / "imagecache.svg"
#: The parts of step 0, in the order a table shows them.
PARTS = ("step0_s", "queue_wait_s", "import_s", "reuse_check_s", "cache_import_s",
         "install_s", "cache_write_s")
#: The three ways, in order: label prefix -> (the report's path, the row's name).
WAYS = {"cold": "cold (imported, installed, exported)",
        "reused": "reused on the node",
        "cached": "from the cache (other nodes)"}


def say(text: str) -> None:
    print(f"imagecache: {text}", file=sys.stderr, flush=True)


def run_once(spec: JobSpec, label: str) -> dict[str, Any]:
    report = Executor(spec, SubprocessBackend()).run()
    row: dict[str, Any] = {"label": label, "status": report.status.name,
                           "path": report.path,
                           "setup": next((n.split(": ", 1)[1].rsplit(" on ", 1)[0]
                                          for n in report.notes
                                          if n.startswith("container ")), None),
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


def table(medians: Mapping[str, Mapping[str, float]], meta: Mapping[str, Any]) -> str:
    def cell(row: Mapping[str, float], key: str) -> str:
        return f"{row[key]:.2f}" if key in row else "-"

    lines = [f"| new allocation ({meta['rounds']} rounds, medians, s) | step 0 | salloc | "
             "import | reuse check | cache import | install | cache write |",
             "|---|---|---|---|---|---|---|---|"]
    for way, name in WAYS.items():
        if way in medians:
            lines.append(f"| {name} | " + " | ".join(cell(medians[way], k) for k in PARTS)
                         + " |")
    return "\n".join(lines)


#: The parts a bar is made of, with their colours (the figure).
_BAR_PARTS = (("queue_wait_s", "salloc", "#8c8c8c"), ("import_s", "import", "#1f77b4"),
              ("reuse_check_s", "reuse check", "#2ca02c"),
              ("cache_import_s", "import from the cache", "#17becf"),
              ("install_s", "install", "#ff7f0e"), ("cache_write_s", "cache write", "#d62728"))


def svg(medians: Mapping[str, Mapping[str, float]], meta: Mapping[str, Any]) -> str:
    """The figure: one horizontal bar per way, split into its parts (median seconds);
    text kept as text, no date (same input, same file)."""
    from matplotlib.figure import Figure

    from benchmarks.charts import _rc

    ways = [w for w in WAYS if w in medians]
    fig = Figure(figsize=(7.2, 2.6), layout="constrained")
    ax = fig.subplots()
    for y, way in enumerate(reversed(ways)):
        left = 0.0
        for key, label, color in _BAR_PARTS:
            width = medians[way].get(key, 0.0)
            if width <= 0:
                continue
            ax.barh(y, width, left=left, color=color, label=label, gid=f"{way}-{key}")
            left += width
        ax.annotate(f"{medians[way].get('step0_s', left):.1f} s", (left, y),
                    xytext=(4, -3), textcoords="offset points", fontsize=8)
    ax.set_yticks(range(len(ways)), [WAYS[w] for w in reversed(ways)], fontsize=8)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="lower right", frameon=False)
    ax.set_xlabel(f"seconds of step 0 of a new allocation ({meta['nodes']} nodes, "
                  f"{meta['image_mb']:.0f} MB image, {meta['install_sleep_s']:.0f} s install;"
                  f" medians of {meta['rounds']})", fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    buf = io.StringIO()
    with _rc():
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def _spec(cluster: localcluster.ClusterInfo, folder: Path, image: Path, repo: Path,
          name: str) -> JobSpec:
    script = folder / "job.slurm"
    script.write_text(f"#!/bin/bash\nsrun --container-name={name} true\necho done\n")
    return JobSpec.from_dict({
        "script_path": str(script), "work_dir": str(folder / "work"),
        "model_name": "bench", "workflow_type": "pytest", "repo_root": str(repo),
        "slurm_params": {"partition": cluster.partition, "account": cluster.account,
                         "nodes": len(cluster.nodes)},
        "alloc_job_name": f"{cluster.account}-{name}.persistent",
        "alloc_time_limit": "00:30:00", "docker_image": str(image),
        "container_name": name, "container_mounts": [f"{repo}:{repo}"],
        "success_patterns": ["done"],
    })


def _rounds(spec: JobSpec, state_dir: Path, rounds: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    name = spec.container_name or ""
    for k in range(rounds):
        (spec.repo_root / "requirements-dev.txt").write_text(f"./devtool\n# round {k}\n")
        rows.append(run_once(spec, f"cold {k + 1}"))
        rows.append(run_once(spec, f"reused {k + 1}"))
        for d in state_dir.glob(f"*/*/data/pyxis_{name}"):  # nodes that never held it
            shutil.rmtree(d, ignore_errors=True)
        rows.append(run_once(spec, f"cached {k + 1}"))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.imagecache")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pad-mb", type=int, default=300)
    parser.add_argument("--install-sleep", type=float, default=10.0)
    args = parser.parse_args(argv)
    cluster = localcluster.up()
    os.environ.update(cluster.env)
    if cluster.containers is None:
        say(f"the local cluster has no containers: {cluster.containers_problem}")
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-imagecache-") as tmp:
        folder = Path(tmp)
        image = padded_image(cluster.containers.images["python"], folder, args.pad_mb)
        name = f"bench-cache-{os.getpid()}"
        spec = _spec(cluster, folder, image, slow_repo(folder, args.install_sleep), name)
        try:
            rows = _rounds(spec, cluster.containers.state_dir, args.rounds)
        finally:
            for d in cluster.containers.state_dir.glob(f"*/*/data/pyxis_{name}"):
                shutil.rmtree(d, ignore_errors=True)
        meta = {"rounds": args.rounds, "pad_mb": args.pad_mb,
                "image_mb": round(image.stat().st_size / 2**20, 1),
                "install_sleep_s": args.install_sleep, "nodes": len(cluster.nodes),
                "load": os.getloadavg()[0]}
    medians = {way: median_row([r for r in rows if r["label"].startswith(way)])
               for way in WAYS}
    RESULTS.write_text(json.dumps({"meta": meta, "runs": rows, "medians": medians},
                                  indent=2) + "\n", encoding="utf-8")
    FIGURE.write_text(svg(medians, meta), encoding="utf-8")
    print(table(medians, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
