"""The race campaign of issue 28: randomized races across two emulated login nodes.

``python -m slurm_fsm_dev.races --races N --seed S`` runs N races on the local cluster
(``SLURM_CONF`` of ``slurm_fsm_dev.localcluster``), each on a checkout of its own (one
``repo_root``, a job name of its own) shared by the two login nodes of
:mod:`slurm_fsm_dev.loginnodes` with the state file's lock local to each node (a
filesystem whose locks do not hold across hosts). The schedule is a function of the
seed alone (:func:`schedule`). Each race starts a ``run`` on node A and, a random
moment later, a ``run``, a ``release`` or a ``release --no-wait`` on node B; some
races also ``kill -9`` node A's orchestrator or pause it (SIGSTOP, then SIGCONT) at a
random moment. During the race a sampler lists the checkout's jobs and steps with
``squeue`` every :data:`SAMPLE_S` s; afterwards ``sacct`` gives every job and step of
the race's name. :func:`check` (pure, unit-tested on constructed rows) then asserts:

1. **no double allocation**: never two live allocations of the checkout at once, in
   any sample nor in ``sacct`` (by submit and end times);
2. **no cancel under a foreign lease**: no allocation was cancelled while another
   run's lease step was alive (a lease step sampled alive after its allocation's
   cancel was asked, or ending with the allocation while its owner lived on well
   after it);
3. **no job killed that was not asked to be**: every run the campaign did not kill
   ends PASSED; a ``release`` ends RELEASED; a ``release --no-wait`` ends RELEASED or
   refuses (exit 3, "in use by").

Results go to a JSON file (``benchmarks/races.json``) with a summary table printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from slurm_fsm_dev.chroot import LOGIN_NODES
from slurm_fsm_dev.loginnodes import on_node, orchestrator

__all__ = ["KINDS", "Action", "Race", "SacctRow", "Sample", "check", "main", "schedule"]

#: the kinds of race, drawn evenly
KINDS = ("run_run", "run_release", "run_release_nowait", "kill9", "sigstop")
#: the sampler's period (s)
SAMPLE_S = 0.2
#: a lease's owner still running this long after its allocation ended (s): the lease
#: was alive at the cancel (its owner stops its lease, then exits within a moment)
OWNER_SLACK_S = 5.0
_LIVE = {"PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING",
         "REQUEUE_HOLD", "REQUEUE_FED", "STOPPED"}
_LEASE = re.compile(r"fsm-lease\.(r[0-9a-f]{12})\.\d+")


@attrs.frozen(kw_only=True)
class Action:
    """One ``slurm-fsm`` command of a race: on which node, what, when (s after the
    race's start); a run's job sleeps ``job_s``."""

    node: str
    command: str  # "run", "release", "release-nowait"
    at_s: float
    job_s: float = 1.0


@attrs.frozen(kw_only=True)
class Race:
    """One race: its actions, and the fault done to action 0 (node A's run), if any:
    ``kill9`` or ``sigstop`` at ``fault_at_s`` (paused ``stop_s``)."""

    index: int
    kind: str
    actions: tuple[Action, ...]
    fault: str | None = None
    fault_at_s: float = 0.0
    stop_s: float = 0.0


def schedule(races: int, seed: int) -> list[Race]:
    """The campaign's races: a function of ``seed`` alone."""
    rng = random.Random(seed)
    out = []
    for index in range(races):
        kind = KINDS[rng.randrange(len(KINDS))]
        first = Action(node="a", command="run", at_s=0.0, job_s=round(rng.uniform(0.5, 3), 2))
        second_cmd = {"run_run": "run", "run_release": "release",
                      "run_release_nowait": "release-nowait"}.get(kind)
        if second_cmd is None:
            second_cmd = rng.choice(("run", "release", "release-nowait"))
        second = Action(node="b", command=second_cmd, at_s=round(rng.uniform(0, 3), 2),
                        job_s=round(rng.uniform(0.5, 2), 2))
        fault = {"kill9": "kill9", "sigstop": "sigstop"}.get(kind)
        out.append(Race(index=index, kind=kind, actions=(first, second), fault=fault,
                        fault_at_s=round(rng.uniform(0.1, 3.5), 2) if fault else 0.0,
                        stop_s=round(rng.uniform(0.5, 3), 2) if fault == "sigstop" else 0.0))
    return out


@attrs.frozen(kw_only=True)
class SacctRow:
    """One row of ``sacct -P -o JobID,JobName,State,Submit,Start,End`` (epoch s; None
    for ``Unknown``/``None``)."""

    job_id: str
    name: str
    state: str
    submit: float | None
    start: float | None
    end: float | None

    @property
    def is_allocation(self) -> bool:
        return "." not in self.job_id

    @property
    def job(self) -> str:
        return self.job_id.split(".", 1)[0]


@attrs.frozen(kw_only=True)
class Sample:
    """What one sampler tick saw: when (epoch s), the checkout's jobs ``{id: state}``
    and their lease steps ``{step id: run id}``."""

    t: float
    jobs: Mapping[str, str]
    leases: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Outcome:
    """How an action ended: its exit code, the report's status and summary, when it
    exited (epoch s); ``killed`` when the campaign killed it; ``run_ids`` its lease
    runs (from its run records, when seen)."""

    command: str
    rc: int | None
    status: str | None
    summary: str = ""
    exited: float | None = None
    killed: bool = False
    stopped: bool = False


def _when(text: str) -> float | None:
    text = text.strip()
    if not text or text in ("Unknown", "None"):
        return None
    return datetime.fromisoformat(text).timestamp()


def parse_sacct(text: str) -> list[SacctRow]:
    """Rows of ``sacct -n -P -o JobID,JobName,State,Submit,Start,End``."""
    out = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 6:
            continue
        out.append(SacctRow(job_id=parts[0], name=parts[1], state=parts[2].split()[0],
                            submit=_when(parts[3]), start=_when(parts[4]),
                            end=_when(parts[5])))
    return out


def check(rows: Sequence[SacctRow], samples: Sequence[Sample],
          outcomes: Sequence[Outcome], *, kill_asked: Mapping[str, float] | None = None,
          lease_owner: Mapping[str, int] | None = None,
          allocated: Mapping[str, float] | None = None) -> dict[str, list[str]]:
    """The race's violations, by invariant (``double``, ``foreign_cancel``,
    ``unasked_kill``): empty lists when all held.

    ``rows``: sacct of the race's jobs and steps; ``samples``: the sampler's ticks;
    ``outcomes``: the actions' ends, in order; ``kill_asked`` and ``allocated``: when
    a cancel of an allocation was asked and when it was made (epoch s to the ms, from
    slurmctld's log; sacct's seconds where the log has none); ``lease_owner``: which
    action owns which lease run id."""
    out: dict[str, list[str]] = {"double": [], "foreign_cancel": [], "unasked_kill": []}
    allocations = [r for r in rows if r.is_allocation]
    asked = dict(kill_asked or {})
    made = dict(allocated or {})

    def span(r: SacctRow) -> tuple[float, float]:
        begin = made.get(r.job_id, r.submit or 0.0)
        end = asked.get(r.job_id, r.end if r.end is not None else float("inf"))
        return begin, end

    for i, a in enumerate(allocations):
        for b in allocations[i + 1:]:
            (a0, a1), (b0, b1) = span(a), span(b)
            if a0 < b1 and b0 < a1:
                out["double"].append(f"sacct: allocations {a.job_id} and {b.job_id} overlap "
                                     f"(submit-end {a0:.0f}-{a1:.0f}, {b0:.0f}-{b1:.0f})")
    for sample in samples:
        live = sorted(j for j, s in sample.jobs.items() if s in _LIVE)
        if len(live) > 1:
            out["double"].append(f"squeue at {sample.t:.2f}: {len(live)} live allocations "
                                 f"{', '.join(live)}")
    owners = dict(lease_owner or {})
    for alloc in allocations:
        if not alloc.state.startswith("CANCELLED"):
            continue
        at = asked.get(alloc.job_id)
        for sample in samples:  # a lease still listed after its allocation's cancel
            if at is None or sample.t <= at:
                continue
            late = [s for s in sample.leases if s.split(".", 1)[0] == alloc.job_id]
            if late:
                out["foreign_cancel"].append(
                    f"allocation {alloc.job_id} cancelled at {at:.2f} while lease step(s) "
                    f"{', '.join(sorted(late))} were listed at {sample.t:.2f}")
                break
        for step in rows:
            found = _LEASE.fullmatch(step.name)
            if (step.job != alloc.job_id or step.is_allocation or found is None
                    or step.end is None or alloc.end is None or step.end < alloc.end):
                continue
            owner = owners.get(found.group(1))
            if owner is None or owner >= len(outcomes):
                continue
            ended = outcomes[owner]
            if ended.killed or ended.exited is None:
                continue
            if ended.exited > alloc.end + 1 + OWNER_SLACK_S:
                out["foreign_cancel"].append(
                    f"allocation {alloc.job_id} cancelled at {alloc.end:.0f} with lease "
                    f"step {step.job_id} of run {found.group(1)}, whose owner (action "
                    f"{owner}) ran on until {ended.exited:.1f}")
    for index, ended in enumerate(outcomes):
        if ended.killed:
            continue
        ok = {"run": ended.status == "PASSED",
              "release": ended.status == "RELEASED",
              "release-nowait": ended.status == "RELEASED"
              or (ended.rc == 3 and "in use by" in ended.summary)}[ended.command]
        if not ok:
            out["unasked_kill"].append(f"action {index} ({ended.command}) ended "
                                       f"{ended.status} (exit {ended.rc}): {ended.summary}")
    return out


# ---------------------------------------------------------------- the real races


def _slurm(*argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,  # noqa: S603
                          check=False)


class Sampler(threading.Thread):
    """Lists the jobs of ``name`` and their lease steps every :data:`SAMPLE_S` s."""

    def __init__(self, name: str, user: str, records: Path | None = None) -> None:
        super().__init__(daemon=True)
        self.name_ = name
        self.user = user
        self.samples: list[Sample] = []
        self.done = threading.Event()
        #: the folder of the race's run records, and ``{run id: host}`` read from them
        self.records = records
        self.hosts: dict[str, str] = {}

    def _read_records(self) -> None:
        if self.records is None:
            return
        for path in self.records.glob(".slurm_run.r????????????.json"):
            run_id = path.name.split(".")[2]
            if run_id in self.hosts:
                continue
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and isinstance(data.get("host"), str):
                self.hosts[run_id] = data["host"]

    def run(self) -> None:
        while not self.done.is_set():
            t = time.time()
            jobs_out = _slurm("squeue", "-h", "-u", self.user, f"--name={self.name_}",
                              "-o", "%i|%T", timeout=10)
            jobs = dict(line.split("|", 1) for line in jobs_out.stdout.split() if "|" in line)
            leases: dict[str, str] = {}
            if jobs:
                steps_out = _slurm("squeue", "-h", "-s", "-j", ",".join(jobs), "-o", "%i|%j",
                                   timeout=10)
                for line in steps_out.stdout.splitlines():
                    step, _, step_name = line.partition("|")
                    found = _LEASE.fullmatch(step_name.strip())
                    if found:
                        leases[step.strip()] = found.group(1)
            self.samples.append(Sample(t=t, jobs=jobs, leases=leases))
            self._read_records()
            self.done.wait(SAMPLE_S)


def controller_times(log: Path, since_offset: int) -> tuple[dict[str, float],
                                                            dict[str, float]]:
    """``({job id: made}, {job id: cancel asked})`` from slurmctld's log after byte
    ``since_offset``: its ``_slurm_rpc_allocate_resources JobId=N`` and
    ``REQUEST_KILL_JOB JobId=N`` lines (to the ms; the first of each counts)."""
    made: dict[str, float] = {}
    asked: dict[str, float] = {}
    try:
        with log.open("rb") as f:
            f.seek(since_offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return made, asked
    for found in re.finditer(r"^\[([0-9T:.-]+)\] (?:sched: )?(_slurm_rpc_allocate_resources|"
                             r"_slurm_rpc_kill_job: REQUEST_KILL_JOB) JobId=(\d+) ",
                             text, re.M):
        into = made if found.group(2) == "_slurm_rpc_allocate_resources" else asked
        into.setdefault(found.group(3), datetime.fromisoformat(found.group(1)).timestamp())
    return made, asked


def _spec(root: Path, node: str, name: str, partition: str, account: str,
          job_s: float) -> Path:
    script = root / f"job-{node}.slurm"
    script.write_text(f"#!/bin/bash\necho start\nsrun --overlap -n1 sleep {job_s:g}\n"
                      "echo end\n")
    data = {"script_path": str(script), "work_dir": str(root / f"work-{node}"),
            "model_name": "race", "workflow_type": "custom", "repo_root": str(root / "repo"),
            "slurm_params": {"partition": partition, "account": account, "nodes": 1},
            "alloc_job_name": name, "alloc_time_limit": "00:30:00",
            "success_patterns": ["end"], "monitor_timeout_seconds": 300}
    path = root / f"spec-{node}.json"
    path.write_text(json.dumps(data))
    return path


def _report(proc: subprocess.Popen[str], timeout: float) -> tuple[int | None, dict[str, Any]]:
    try:
        out, _err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _err = proc.communicate(timeout=30)
    try:
        report = json.loads(out)
    except ValueError:
        report = {}
    return proc.returncode, report if isinstance(report, dict) else {}


def run_race(race: Race, *, root: Path, env: Mapping[str, str], partition: str,
             account: str, user: str, slurmctld_log: Path | None,
             timeout_s: float = 180.0) -> dict[str, Any]:
    """Run one race under ``root``; its record with the violations found."""
    name = f"race-{race.index}-{uuid.uuid4().hex[:6]}.persistent"
    root.mkdir(parents=True, exist_ok=True)
    log_offset = slurmctld_log.stat().st_size if slurmctld_log and slurmctld_log.exists() else 0
    specs = {a.node: _spec(root, a.node, name, partition, account, a.job_s)
             for a in race.actions}
    hosts = {"a": LOGIN_NODES[0], "b": LOGIN_NODES[1]}
    sampler = Sampler(name, user, root / "repo" / "work_dirs")
    sampler.start()
    started = time.monotonic()
    procs: list[subprocess.Popen[str] | None] = [None] * len(race.actions)
    exited: list[float | None] = [None] * len(race.actions)
    killed = [False] * len(race.actions)
    stopped = [False] * len(race.actions)
    events: list[tuple[float, str]] = []
    pending = sorted(range(len(race.actions)), key=lambda i: race.actions[i].at_s)
    fault_done = race.fault is None
    resume_at: float | None = None
    stopped_pid: int | None = None
    while True:
        now = time.monotonic() - started
        while pending and race.actions[pending[0]].at_s <= now:
            i = pending.pop(0)
            action = race.actions[i]
            args = (["release", str(specs[action.node]), "--no-wait"]
                    if action.command == "release-nowait"
                    else [action.command, str(specs[action.node])])
            procs[i] = on_node(hosts[action.node], [*args, "--json", "--quiet"], env=env,
                               linger_s=3, lock_dir=root / f"locks-{action.node}")
            events.append((time.time(), f"start {i} {action.command} on {action.node}"))
        target = procs[0]
        if not fault_done and target is not None and now >= race.fault_at_s:
            fault_done = True
            pid = orchestrator(target.pid)
            if pid is not None and target.poll() is None:
                if race.fault == "kill9":
                    os.kill(pid, signal.SIGKILL)
                    killed[0] = True
                    events.append((time.time(), f"kill -9 action 0 (pid {pid})"))
                else:
                    os.kill(pid, signal.SIGSTOP)
                    stopped[0] = True
                    stopped_pid = pid
                    resume_at = now + race.stop_s
                    events.append((time.time(), f"SIGSTOP action 0 (pid {pid})"))
            else:
                events.append((time.time(), f"{race.fault}: action 0 had no orchestrator"))
        if resume_at is not None and now >= resume_at and stopped_pid is not None:
            os.kill(stopped_pid, signal.SIGCONT)
            events.append((time.time(), "SIGCONT action 0"))
            resume_at = None
        for i, proc in enumerate(procs):
            if proc is not None and exited[i] is None and orchestrator(proc.pid) is None \
                    and (proc.poll() is not None or time.monotonic() - started > 0.5):
                # the orchestrator is gone (the shell lingers after it)
                exited[i] = time.time()
        if not pending and fault_done and resume_at is None and all(
                p is not None and p.poll() is not None for p in procs):
            break
        if now > timeout_s:
            events.append((time.time(), "race timed out"))
            break
        time.sleep(0.05)
    outcomes = []
    for i, action in enumerate(race.actions):
        proc = procs[i]
        rc, report = _report(proc, 60) if proc is not None else (None, {})
        outcomes.append(Outcome(command=action.command, rc=rc, status=report.get("status"),
                                summary=str(report.get("summary", ""))[:400],
                                exited=exited[i] or time.time(), killed=killed[i],
                                stopped=stopped[i]))
    lease_owner = _lease_owners(root, hosts, race)
    by_host = {hosts[a.node]: i for i, a in enumerate(race.actions) if a.command == "run"}
    lease_owner.update({run: by_host[host] for run, host in sampler.hosts.items()
                        if host in by_host})
    # clean up: release what is left, then every job of the name
    done = on_node(hosts["a"], ["release", str(specs["a"]), "--json", "--quiet"], env=env,
                   lock_dir=root / "locks-a")
    _report(done, 120)
    time.sleep(SAMPLE_S * 2)
    sampler.done.set()
    sampler.join(timeout=20)
    _slurm("scancel", "-u", user, f"--name={name}")
    rows = _sacct(name)
    made, asked = (controller_times(slurmctld_log, log_offset) if slurmctld_log
                   else ({}, {}))
    ours = {r.job for r in rows}  # other races (the suite's) share the controller
    made = {j: t for j, t in made.items() if j in ours}
    asked = {j: t for j, t in asked.items() if j in ours}
    violations = check(rows, sampler.samples, outcomes, kill_asked=asked,
                       lease_owner=lease_owner, allocated=made)
    return {"index": race.index, "kind": race.kind, "name": name,
            "race": attrs.asdict(race),
            "outcomes": [attrs.asdict(o) for o in outcomes],
            "allocations": sorted({r.job for r in rows}),
            "samples": len(sampler.samples),
            "max_live": max((sum(s in _LIVE for s in x.jobs.values())
                             for x in sampler.samples), default=0),
            "events": [f"{t:.2f} {what}" for t, what in events],
            "sacct": [attrs.asdict(r) for r in rows],
            "controller": {"allocated": made, "cancel_asked": asked},
            "lease_owner": lease_owner,
            "violations": violations,
            "wall_s": round(time.monotonic() - started, 2)}


def _lease_owners(root: Path, hosts: Mapping[str, str], race: Race) -> dict[str, int]:
    """Which action owns which run id, from the run records left (a killed run's) and
    the runs' logs: each node runs at most one ``run`` per race, so the host names it."""
    owners: dict[str, int] = {}
    by_host = {hosts[a.node]: i for i, a in enumerate(race.actions) if a.command == "run"}
    for record in (root / "repo" / "work_dirs").glob(".slurm_run.r????????????.json"):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if data.get("host") in by_host and isinstance(data.get("run_id"), str):
            owners[data["run_id"]] = by_host[data["host"]]
    return owners


def _sacct(name: str) -> list[SacctRow]:
    """Every job and step of ``name`` once accounting has them all ended (or 20 s)."""
    deadline = time.monotonic() + 20
    rows: list[SacctRow] = []
    while time.monotonic() < deadline:
        proc = _slurm("sacct", "-n", "-P", "-S", "now-1days", f"--name={name}",
                      "-o", "JobID,JobName,State,Submit,Start,End", timeout=20)
        jobs = {r.job for r in parse_sacct(proc.stdout)}
        if jobs:
            proc = _slurm("sacct", "-n", "-P", "-j", ",".join(sorted(jobs)),
                          "-o", "JobID,JobName,State,Submit,Start,End", timeout=20)
        rows = parse_sacct(proc.stdout)
        if all(r.end is not None for r in rows):
            return rows
        time.sleep(0.5)
    return rows


def summarize(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-kind counts of races and violations."""
    kinds: dict[str, dict[str, int]] = {}
    for result in results:
        row = kinds.setdefault(result["kind"], {"races": 0, "double": 0,
                                                "foreign_cancel": 0, "unasked_kill": 0})
        row["races"] += 1
        for key, found in result["violations"].items():
            row[key] += bool(found)
    total = {k: sum(r[k] for r in kinds.values())
             for k in ("races", "double", "foreign_cancel", "unasked_kill")}
    return {"by_kind": kinds, "total": total}


def table(summary: Mapping[str, Any]) -> str:
    """The summary as a Markdown table."""
    lines = ["| kind | races | double allocations | cancels under a foreign lease "
             "| jobs killed unasked |", "|---|---|---|---|---|"]
    rows: Iterable[tuple[str, Mapping[str, int]]] = [
        *sorted(summary["by_kind"].items()), ("**total**", summary["total"])]
    for kind, row in rows:
        lines.append(f"| {kind} | {row['races']} | {row['double']} | "
                     f"{row['foreign_cancel']} | {row['unasked_kill']} |")
    return "\n".join(lines)


def recheck(result: dict[str, Any], log: Path | None) -> dict[str, list[str]]:
    """The violations of a recorded race, checked again from what Slurm still has:
    ``sacct`` of its name and slurmctld's whole log (for races recorded before their
    rows were); the sampler's findings recorded then are kept (its samples were not)."""
    rows = _sacct(result["name"])
    jobs = {r.job for r in rows}
    made, asked = controller_times(log, 0) if log is not None else ({}, {})
    made = {j: t for j, t in made.items() if j in jobs}
    asked = {j: t for j, t in asked.items() if j in jobs}
    outcomes = [Outcome(**o) for o in result["outcomes"]]
    found = check(rows, [], outcomes, kill_asked=asked, allocated=made,
                  lease_owner=result.get("lease_owner", {}))
    kept = {k: [v for v in found_then if v.startswith("squeue at") or "were listed at" in v]
            for k, found_then in result["violations"].items()}
    result.update(sacct=[attrs.asdict(r) for r in rows],
                  controller={"allocated": made, "cancel_asked": asked})
    return {k: found[k] + [v for v in kept.get(k, []) if v not in found[k]] for k in found}


def _code_version() -> str:
    """The worktree's commit (``+`` when it has changes): what the race ran."""
    here = Path(__file__).resolve().parent.parent
    head = _slurm("git", "-C", str(here), "rev-parse", "--short", "HEAD").stdout.strip()
    dirty = _slurm("git", "-C", str(here), "status", "--porcelain", "--untracked-files=no")
    return head + ("+" if dirty.stdout.strip() else "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slurm_fsm_dev.races",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--races", type=int, default=10)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--first", type=int, default=0,
                        help="start at this race of the schedule (resume a campaign)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/races.json"))
    parser.add_argument("--work", type=Path, default=None,
                        help="where the races' checkouts go (default: a folder under "
                        "SLURM_FSM_LOCAL_DIR)")
    parser.add_argument("--recheck", action="store_true",
                        help="check the races recorded in --out again (sacct, slurmctld's "
                        "log) where they lack their sacct rows; no race is run")
    args = parser.parse_args(argv)
    from slurm_fsm_dev import localcluster

    info = localcluster.bring_up().info
    env = {**os.environ, **info.env}
    os.environ.update(info.env)
    work = args.work or info.base_dir / "races"
    slurmctld_log = info.log_dir / "slurmctld.log"
    results: list[dict[str, Any]] = []
    if args.recheck:
        data = json.loads(args.out.read_text())
        for result in data["races"]:
            if "sacct" not in result:
                result["violations"] = recheck(result, slurmctld_log)
        data["summary"] = summarize(data["races"])
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(table(data["summary"]))
        return 0
    if args.first and args.out.exists():
        results = [r for r in json.loads(args.out.read_text()).get("races", [])
                   if r["index"] < args.first]
    began = time.monotonic()
    for race in schedule(args.first + args.races, args.seed)[args.first:]:
        result = run_race(race, root=work / f"race-{race.index:04d}", env=env,
                          partition=info.partition, account=info.account, user=info.user,
                          slurmctld_log=slurmctld_log)
        result["code"] = _code_version()
        results.append(result)
        bad = {k: v for k, v in result["violations"].items() if v}
        print(f"race {race.index} {race.kind}: "
              f"{[o['status'] for o in result['outcomes']]} {result['wall_s']} s"
              + (f" VIOLATIONS {bad}" if bad else ""), flush=True)
        summary = summarize(results)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(
            {"seed": args.seed, "races_run": len(results),
             "wall_s": round(sum(r["wall_s"] for r in results), 1),
             "summary": summary, "races": results}, indent=1) + "\n")
    print(table(summarize(results)))
    print(f"{len(results)} races, seed {args.seed}, this session "
          f"{time.monotonic() - began:.0f} s")
    return 0 if not any(summarize(results)["total"][k]
                        for k in ("double", "foreign_cancel", "unasked_kill")) else 1


if __name__ == "__main__":
    sys.exit(main())
