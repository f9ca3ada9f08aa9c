"""Issue 17 item 8 on the fake: ``skip_install: true`` does not record the container as
installed (the real-cluster test is tests/integration/test_skip_install_real.py)."""

from __future__ import annotations

import json

from slurm_fsm.machine import AllocationMachine
from slurm_fsm.step0.table import State
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


def test_skip_install_then_pytest_installs_then_nothing_more(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    custom = make_spec(workflow_type="custom", skip_install=True, docker_image=IMAGE,
                       container_name="llama")
    m = AllocationMachine(custom, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Allocating", "Importing", "Ready"]
    assert json.loads(custom.state_path.read_text())["installed"] is False
    tests = make_spec(docker_image=IMAGE, container_name="llama")  # pytest: installs
    m = AllocationMachine(tests, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Installing", "Ready"]
    node = fake.nodes["node01"]
    assert any("pip install" in p for p in node.containers["llama"].packages)
    again = AllocationMachine(custom, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert again.prepare().state is State.Ready
    assert again.path == ["NoState", "Validating", "Ready"]


def test_a_switch_to_a_skip_install_container_is_not_recorded_installed(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    first = make_spec(docker_image=IMAGE, container_name="one")
    assert AllocationMachine(first, fake, clock=fake.clock).prepare().state is State.Ready  # type: ignore[arg-type]
    custom = make_spec(workflow_type="custom", skip_install=True, docker_image=IMAGE,
                       container_name="two")
    m = AllocationMachine(custom, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Importing", "Ready"]
    state = json.loads(custom.state_path.read_text())
    assert (state["container_name"], state["installed"]) == ("two", False)


def test_two_runs_racing_into_one_allocation_install_once(make_spec: SpecFactory) -> None:
    """Issue 28: run B read the state file (installed: false) before run A, on another
    host, recorded its install. B's install steps wait for A's node-local lock, find
    A's markers and skip: each pip install ran once per node."""
    fake = FakeCluster()
    spec = make_spec(docker_image=IMAGE, container_name="llama", slurm_params={"nodes": 2})
    a = AllocationMachine(spec, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert a.prepare().state is State.Ready
    record = json.loads(spec.state_path.read_text())
    assert record["installed"] is True
    record["installed"] = False  # what B read before A wrote its record
    spec.state_path.write_text(json.dumps(record))
    b = AllocationMachine(spec, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert b.prepare().state is State.Ready
    assert b.path == ["NoState", "Validating", "Installing", "Ready"]
    for node in ("node01", "node02"):
        packages = fake.nodes[node].containers["llama"].packages
        assert packages == ["pip install -e .", "pip install -r requirements-dev.txt"]
    steps = [c.args["request"] for c in fake.calls if c.op == "run_step"]
    installs = [r for r in steps if r.once is not None]
    assert len(installs) == 4 and all(r.once.startswith("install llama ") for r in installs)
