"""Charts of the benchmark figures, drawn from ``benchmarks/results.json``.

The docs build (``scripts/docs_hooks.py``) draws them as SVG with matplotlib every
time the site is built, so a chart always shows the numbers in the table next to
it; ``benchmarks/run.py`` only writes a ``<!-- bench-chart:NAME -->`` marker under
each figure's table. matplotlib is imported only when a chart is drawn.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["CHARTS", "MARKER", "STREAM_MODES", "STREAM_TARGET_S", "available", "charts_of",
           "marker", "render", "stream_svg"]

Figs = Mapping[str, Mapping[str, Any]]

#: ``<!-- bench-chart:NAME -->`` in docs/benchmarks.md is replaced by chart NAME.
MARKER = "<!-- bench-chart:{name} -->"

#: chart name -> (the figure it draws, the alt text / caption)
CHARTS: dict[str, tuple[str, str]] = {
    "warm-overhead": ("warm", "Warm-run overhead: where the time of Executor.run() goes, "
                              "against the bare script and a bare srun step (ms, median)"),
    "per-job": ("series", "Seconds per job over 20 small jobs: persistent allocation, "
                          "one-shot sbatch, submitit (median, min-max)"),
    "monitor-cost": ("monitor", "Monitor CPU seconds per GiB of log against the log's size "
                                "(median, min-max): flat means linear"),
}

#: The rows each chart needs (a figure of an older results file may lack some).
_NEEDS: dict[str, tuple[str, ...]] = {
    "warm-overhead": ("a_step0_ms", "a_start_ms", "a_run_ms", "b_cli_ms", "c_bare_bash_ms",
                      "d_bare_srun_ms"),
    "per-job": ("persistent_per_job_s", "one_shot_per_job_s"),
    "monitor-cost": ("cpu_s_per_gib_fast_256mib",),
}


def marker(name: str) -> str:
    """The placeholder of chart ``name`` in docs/benchmarks.md."""
    return MARKER.format(name=name)


def _rows(figs: Figs, figure: str) -> dict[str, Mapping[str, Any]]:
    f = figs.get(figure)
    if not f or f.get("error"):
        return {}
    return {r["key"]: r for r in f.get("rows", ())}


def available(figs: Figs) -> list[str]:
    """The charts that ``figs`` (the results file's ``figures``) has the numbers for."""
    return [name for name, (figure, _) in CHARTS.items()
            if all(k in _rows(figs, figure) for k in _NEEDS[name])]


def charts_of(figure: str, figs: Figs) -> list[str]:
    """The available charts drawn from ``figure``."""
    return [n for n in available(figs) if CHARTS[n][0] == figure]


def render(name: str, figs: Figs) -> str:
    """Chart ``name`` as an SVG document (text kept as text, no date: same input, same file)."""
    if name not in available(figs):
        raise KeyError(f"chart {name!r}: results lack figure {CHARTS[name][0]!r} or its rows")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.2, 3.0), layout="constrained")
    ax = fig.add_subplot()
    _DRAW[name](ax, figs)
    ax.set_title(CHARTS[name][1].split(":")[0], loc="left", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    buf = io.StringIO()
    with _rc():
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def _rc() -> Any:
    import matplotlib

    return matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "slurm_fsm",
                                  "font.family": ["DejaVu Sans", "sans-serif"]})


_BLUE, _ORANGE, _GREY, _GREEN = "#1f77b4", "#ff7f0e", "#8c8c8c", "#2ca02c"


def _err(rows: Sequence[Mapping[str, Any]]) -> list[list[float]]:
    return [[r["median"] - r["min"] for r in rows], [r["max"] - r["median"] for r in rows]]


def _per_job(ax: Any, figs: Figs) -> None:
    rows = _rows(figs, "series")
    keys = [("persistent_per_job_s", "persistent allocation", _GREEN),
            ("one_shot_per_job_s", "one-shot (sbatch)", _ORANGE),
            ("submitit_per_job_s", "submitit", _GREY)]
    present = [(rows[k], label, c) for k, label, c in keys if k in rows]
    ys = list(range(len(present)))[::-1]
    data = [r for r, _, _ in present]
    ax.barh(ys, [r["median"] for r in data], xerr=_err(data), color=[c for _, _, c in present],
            capsize=3, height=0.6)
    ax.set_yticks(ys, [label for _, label, _ in present])
    ax.set_xlabel("seconds per job (median of the repetitions; bars: min-max)")
    for y, r in zip(ys, data, strict=True):
        ax.annotate(f"{r['median']:.3f} s", (r["max"], y), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=9)
    ax.set_xlim(0, max(r["max"] for r in data) * 1.25)


def _warm_overhead(ax: Any, figs: Figs) -> None:
    rows = _rows(figs, "warm")
    parts = [("a_step0_ms", "step 0 (squeue)", _BLUE),
             ("a_start_ms", "pre-flight srun + script start", _ORANGE),
             ("a_run_ms", "script run + monitor", _GREEN)]
    left = 0.0
    for key, label, color in parts:
        v = rows[key]["median"]
        ax.barh([3], [v], left=[left], color=color, label=label, height=0.6)
        left += v
    singles = [("b_cli_ms", "(b) CLI: python -m slurm_fsm run", 2),
               ("c_bare_bash_ms", "(c) bare bash script", 1),
               ("d_bare_srun_ms", "(d) bare srun step", 0)]
    for key, _, y in singles:
        ax.barh([y], [rows[key]["median"]], color=_GREY, height=0.6)
    ax.set_yticks([3, 2, 1, 0], ["(a) Executor.run()", *(label for _, label, _ in singles)])
    whole = rows.get("a_executor_ms", {"median": left})["median"]
    totals = [(3, left, f"{whole:.1f} ms"),
              *((y, rows[k]["median"], f"{rows[k]['median']:.1f} ms") for k, _, y in singles)]
    for y, v, text in totals:
        ax.annotate(text, (v, y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=9)
    ax.set_xlim(0, max(v for _, v, _ in totals) * 1.2)
    ax.set_xlabel("milliseconds (median; the parts of (a) are each their own median)")
    ax.legend(loc="lower right", fontsize=8, frameon=False)


def _monitor_cost(ax: Any, figs: Figs) -> None:
    rows = _rows(figs, "monitor")
    for mode, color, label in (("fast", _BLUE, "writer as fast as it can"),
                               ("paced", _ORANGE, "writer paced at 64 MiB/s")):
        pts = [(mib, rows[f"cpu_s_per_gib_{mode}_{mib}mib"]) for mib in (256, 512, 1024)
               if f"cpu_s_per_gib_{mode}_{mib}mib" in rows]
        if not pts:
            continue
        xs = [p[0] for p in pts]
        data = [p[1] for p in pts]
        ax.errorbar(xs, [r["median"] for r in data], yerr=_err(data), marker="o",
                    color=color, label=label, capsize=3)
    ax.set_xscale("log", base=2)
    ax.set_xticks([256, 512, 1024], ["256 MiB", "512 MiB", "1 GiB"])
    ax.set_ylim(bottom=0)
    ax.set_ylabel("CPU s per GiB")
    ax.set_xlabel("log size")
    ax.legend(loc="lower right", fontsize=8, frameon=False)


_DRAW: dict[str, Callable[[Any, Figs], None]] = {
    "per-job": _per_job,
    "warm-overhead": _warm_overhead,
    "monitor-cost": _monitor_cost,
}


# --------------------------------------------------------------------------------------
# The stream of jobs across real expiries (benchmarks/stream.py, issue 27)

#: how each mode of benchmarks/stream.json is named and coloured in the figure
STREAM_MODES: dict[str, tuple[str, str]] = {
    "today": ("today's path (warm_successor: false)", _ORANGE),
    "handoff": ("warm successor (warm_successor: true)", _BLUE),
}
#: the most a job's step 0 may take after the first (issue 27's "done when"), seconds
STREAM_TARGET_S = 3.0


def stream_svg(results: Sequence[Mapping[str, Any]]) -> str:
    """The stream figure as an SVG document: one panel per mode of ``results`` (the
    ``results`` of ``benchmarks/stream.json``), each job's step 0 seconds (log scale)
    against when it started; a dashed line at each hand-off (a job on another
    allocation than the job before), the long job ringed, the 3 s target as a line.
    Every mark has an SVG id (``stream-<mode>-jobs``, ``stream-<mode>-handoff-<k>``,
    ``stream-<mode>-long``, ``stream-<mode>-target``), so a test can count them; text is
    kept as text, no date: same input, same file."""
    from matplotlib.figure import Figure

    known = [r for r in results if r.get("jobs")]
    if not known:
        raise ValueError("no mode with jobs to draw")
    fig = Figure(figsize=(7.2, 0.8 + 2.2 * len(known)), layout="constrained")
    axes = fig.subplots(len(known), 1, sharex=True, squeeze=False)[:, 0]
    lowest = min(max(j["step0_s"], 0.01) for r in known for j in r["jobs"])
    highest = max(j["step0_s"] for r in known for j in r["jobs"])
    for ax, r in zip(axes, known, strict=True):
        mode = str(r["mode"])
        label, color = STREAM_MODES.get(mode, (mode, _GREEN))
        jobs = r["jobs"]
        xs = [j["t"] for j in jobs]
        ys = [max(j["step0_s"], 0.01) for j in jobs]
        ax.scatter(xs, ys, s=12, color=color, zorder=3, gid=f"stream-{mode}-jobs")
        for k, prev_next in enumerate(_handoffs(jobs)):
            ax.axvline(prev_next, color=_GREY, linestyle="--", linewidth=1,
                       gid=f"stream-{mode}-handoff-{k}")
        longs = [j for j in jobs if j.get("long")]
        for j in longs:
            ax.scatter([j["t"]], [max(j["step0_s"], 0.01)], s=90, facecolors="none",
                       edgecolors="black", linewidths=1.2, zorder=4,
                       gid=f"stream-{mode}-long")
            ax.annotate(f"long job ({j['expected_s']} s expected)", (j["t"], max(
                j["step0_s"], 0.01)), xytext=(6, 6), textcoords="offset points", fontsize=8)
        ax.axhline(STREAM_TARGET_S, color=_GREEN, linewidth=1, gid=f"stream-{mode}-target")
        after = [j["step0_s"] for j in jobs[1:]]
        worst = f"{max(after):.2f} s" if after else "n/a"
        passed = sum(1 for j in jobs if j["status"] == "PASSED")
        ax.set_title(f"{label}\n{passed}/{len(jobs)} PASSED, {len(_handoffs(jobs))} "
                     f"hand-offs, longest step 0 after the first {worst}, at most "
                     f"{r.get('most_allocations_alive', '?')} allocations alive",
                     loc="left", fontsize=9)
        ax.set_yscale("log")
        ax.set_ylim(lowest / 2, highest * 2)
        ax.set_ylabel("step 0 (s)")
        ax.spines[["top", "right"]].set_visible(False)
    axes[0].annotate("3 s", (0, STREAM_TARGET_S), xytext=(2, 2), textcoords="offset points",
                     fontsize=8, color=_GREEN)
    axes[-1].set_xlabel("seconds into the stream (a job per dot; dashed: a hand-off to "
                        "another allocation)")
    buf = io.StringIO()
    with _rc():
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def _handoffs(jobs: Sequence[Mapping[str, Any]]) -> list[float]:
    """When each job that ran on another allocation than the job before it started."""
    return [j["t"] for prev, j in itertools.pairwise(jobs)
            if j.get("allocation") != prev.get("allocation")]
