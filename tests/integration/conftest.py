"""The ``local_cluster`` fixture: a real local Slurm cluster for ``@pytest.mark.slurm`` tests.

It reuses a healthy cluster that is already up (``scripts/local-slurm up``) or starts
one, and fails (never skips) when it cannot. At the end of the session it fails
when a job is left behind (an allocation a test forgot to release), then stops the
cluster only if this session started it (set ``SLURM_FSM_KEEP_CLUSTER=1`` to keep it).

The cluster has the configuration ``$SLURM_FSM_LOCAL_CONFIG`` names
(:func:`slurm_fsm_dev.localcluster.config_features`). A test whose behaviour
depends on it carries ``@pytest.mark.config(...)``: keywords naming what it needs
(``cgroup=True``, ``noenforce=False``...; none: it runs on every configuration and
belongs to the configuration-dependent subset). A session deselects (never skips)
the tests whose needs its configuration does not meet, and ``-m config`` selects
the configuration-dependent ones (``make test-confined``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_fsm_dev import localcluster, localpyxis
from slurm_fsm_dev.localcluster import ClusterInfo, ContainerInfo, LocalClusterError

from .containers import ContainerNames, pyxis_or_skip
from .helpers import JobNames

LEFTOVER_GRACE_SECONDS = 5.0


def config_needs(item: pytest.Item) -> dict[str, bool]:
    """What ``item``'s ``config`` markers need: feature -> present (True) or absent."""
    needs: dict[str, bool] = {}
    for mark in item.iter_markers("config"):
        if mark.args:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.config takes keywords "
                                    f"(cgroup=True), not {mark.args!r}")
        for feature, wanted in mark.kwargs.items():
            if feature not in localcluster.FEATURES or not isinstance(wanted, bool):
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.config({feature}={wanted!r}): features "
                    f"are {', '.join(localcluster.FEATURES)}, each True or False")
            needs[feature] = wanted
    return needs


def needs_containers(item: pytest.Item) -> bool:
    """The test needs real pyxis + enroot: the ``pyxis`` fixture, or the ``containers`` mark."""
    return "pyxis" in getattr(item, "fixturenames", ()) or \
        item.get_closest_marker("containers") is not None


def _deselect(config: pytest.Config, items: list[pytest.Item],
              keep: Callable[[pytest.Item], bool]) -> int:
    kept = [item for item in items if keep(item)]
    dropped = [item for item in items if not keep(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    return len(dropped)


@pytest.hookimpl(trylast=True)  # after ``-m``: a session of no container test fetches nothing
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tests whose ``config`` needs the session's configuration
    (``$SLURM_FSM_LOCAL_CONFIG``) does not meet; and, on a machine where neither the
    vendored pyxis sources nor the pinned releases can be had (a clone without
    ``../shared``, no network), the container tests, said in one line."""
    try:
        have = set(localcluster.config_features())
    except LocalClusterError as exc:
        raise pytest.UsageError(str(exc)) from exc
    _deselect(config, items, lambda item: all(
        (feature in have) == wanted for feature, wanted in config_needs(item).items()))
    if not any(needs_containers(item) for item in items):
        return
    why = localpyxis.unavailable(say=lambda _line: None)
    if why:
        n = _deselect(config, items, lambda item: not needs_containers(item))
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        line = f"{localpyxis.NO_CONTAINERS}: the {n} tests that need pyxis + enroot " \
               f"deselected ({why})"
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line)


def _squeue(info: ClusterInfo) -> list[str]:
    """``squeue -h`` lines of the cluster: ``JOBID STATE NAME USER``."""
    proc = subprocess.run(
        ["squeue", "-h", "-o", "%i %T %j %u"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **info.env},
        check=False,
    )
    if proc.returncode != 0:
        raise LocalClusterError(f"squeue -h: exit {proc.returncode}: {proc.stderr.strip()}")
    return [line for line in proc.stdout.splitlines() if line.strip()]


def _leftovers(info: ClusterInfo, before: set[str]) -> list[str]:
    """Jobs that appeared during the session and are still there after a grace period
    (a just-cancelled job shows as COMPLETING for a moment)."""
    deadline = time.monotonic() + LEFTOVER_GRACE_SECONDS
    while True:
        jobs = [line for line in _squeue(info) if line.split()[0] not in before]
        if not jobs or time.monotonic() > deadline:
            return jobs
        time.sleep(0.2)


def _container_leftovers(info: ClusterInfo, before: set[Path]) -> str:
    """Containers (pyxis keeps them after their job) that appeared during the session
    and are still on a node; removed when found, so the next session starts clean."""
    if info.containers is None:
        return ""
    left = [d for d in info.containers.container_dirs() if d not in before]
    for d in left:
        shutil.rmtree(d, ignore_errors=True)
    if not left:
        return ""
    return (f"{len(left)} container(s) left behind at the end of the session (removed):\n  "
            + "\n  ".join(str(d) for d in left) + "\n")


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[ClusterInfo]:
    try:
        result = localcluster.bring_up()
    except LocalClusterError as exc:
        text = str(exc)
        if "--- " not in text:  # the start-up errors carry the log tails already
            text += "\n" + localcluster.log_tails()
        pytest.fail(f"the local Slurm cluster cannot come up: {text}", pytrace=False)
    info = result.info
    saved_conf = os.environ.get("SLURM_CONF")
    saved_path = os.environ.get("PATH")
    os.environ.update(info.env)  # SLURM_CONF, and PATH with the nvidia-smi stand-in
    before = {line.split()[0] for line in _squeue(info)}  # not ours: existed already
    containers_before = set(info.containers.container_dirs()) if info.containers else set()
    problem = ""
    try:
        yield info
    finally:
        try:
            problem = _container_leftovers(info, containers_before)
            left = _leftovers(info, before)
            if left:
                problem += (
                    f"{len(left)} job(s) left behind at the end of the session "
                    "(squeue -h: JOBID STATE NAME USER):\n  " + "\n  ".join(left)
                )
                if result.started:  # ours to clean; someone else's cluster: only report
                    subprocess.run(
                        ["scancel", *(line.split()[0] for line in left)],
                        timeout=30,
                        env={**os.environ, **info.env},
                        check=False,
                    )
        except (LocalClusterError, subprocess.SubprocessError) as exc:
            problem = f"cannot check for leftover jobs: {exc}"
        finally:
            if saved_conf is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = saved_conf
            if saved_path is not None:
                os.environ["PATH"] = saved_path
            if result.started and os.environ.get("SLURM_FSM_KEEP_CLUSTER") != "1":
                localcluster.down()
    if problem:
        pytest.fail(problem, pytrace=False)


@pytest.fixture
def names(local_cluster: ClusterInfo) -> Iterator[JobNames]:
    """Unique job names for one test; every job of those names is cancelled at its end."""
    n = JobNames(local_cluster.user)
    try:
        yield n
    finally:
        n.cleanup()


@pytest.fixture
def pyxis(local_cluster: ClusterInfo) -> ContainerInfo:
    """The cluster's real pyxis + enroot (:func:`.containers.pyxis_or_skip`)."""
    return pyxis_or_skip(local_cluster)


@pytest.fixture
def cnames(pyxis: ContainerInfo, names: JobNames) -> Iterator[ContainerNames]:
    """Container names for one test, removed from every node at its end."""
    c = ContainerNames(pyxis)
    try:
        yield c
    finally:
        c.cleanup()  # after the jobs (``names`` is torn down later: it was asked first)
