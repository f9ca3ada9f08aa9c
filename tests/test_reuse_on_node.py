"""Issue 42 item 1 on the fake: a new allocation whose node kept the spec's container
(pyxis' global scope), set up from the same image and install inputs, uses it: no
import, no install. Anything different is imported and installed again. The real-pyxis
tests are in tests/integration/test_reuse_on_node_real.py; the parity scenarios in
tests/integration/test_parity.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import attrs
import pytest

from slurm_fsm import setupkey, slurmcli
from slurm_fsm.backend import StepRequest, StepResult
from slurm_fsm.machine import SETUP_COLD, SETUP_REUSED, AllocationMachine
from slurm_fsm.spec import JobSpec
from slurm_fsm.step0.table import State
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

COLD = ["NoState", "Allocating", "Importing", "Installing", "Ready"]
REUSED = ["NoState", "Allocating", "Importing", "Ready"]


def _repo(root: Path) -> Path:
    (root / "devtool").mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\n')
    (root / "requirements-dev.txt").write_text("-r requirements-test.txt\n./devtool\n")
    (root / "requirements-test.txt").write_text("pytest\n")
    (root / "devtool" / "pyproject.toml").write_text('[project]\nname = "devtool"\n')
    (root / "devtool" / "tool.py").write_text("X = 1\n")
    return root


def _spec(make_spec: SpecFactory, tmp_path: Path, image: Path | str, **over: object
          ) -> JobSpec:
    _repo(tmp_path / "repo")
    return make_spec(docker_image=str(image), container_name="llama", **over)


def _image(tmp_path: Path, name: str = "img.sqsh", content: bytes = b"one") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def _run(spec: JobSpec, fake: FakeCluster) -> tuple[AllocationMachine, list[str]]:
    """Step 0 of one run, then a release (a new allocation next time); the argvs of
    the steps step 0 ran."""
    before = len(fake.calls)
    m = AllocationMachine(spec, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert m.prepare().state is State.Ready, (m.path, m.failure)
    steps = [" ".join(c.args["request"].argv) for c in fake.calls[before:]
             if c.op == "run_step"]
    release = attrs.evolve(spec, release_allocation=True)
    assert AllocationMachine(release, fake, clock=fake.clock).prepare().state is State.Released  # type: ignore[arg-type]
    return m, steps


def _pips(steps: list[str]) -> list[str]:
    return [s for s in steps if s.startswith("pip install")]


def test_a_new_allocation_uses_the_container_the_node_kept(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    fake = FakeCluster()
    repo = tmp_path / "repo"
    spec = _spec(make_spec, tmp_path, _image(tmp_path), container_mounts=f"{repo}:{repo}")
    first, steps = _run(spec, fake)
    assert (first.path, first.container_setup, len(_pips(steps))) == (COLD, SETUP_COLD, 2)
    again, steps = _run(spec, fake)
    assert again.path == REUSED
    assert again.container_setup == SETUP_REUSED
    assert _pips(steps) == []  # nothing installed
    # one step: the keys read and the mounts warmed
    assert steps == [" ".join(slurmcli.setup_key_read_argv([str(repo)]))]
    assert not any(c.op == "run_step" and c.args["request"].container is not None
                   and c.args["request"].container.image for c in fake.calls[-12:])
    assert again.alloc is not None and again.alloc.installed
    assert any("reused on node01" in t.reason for t in again.history)


@pytest.mark.parametrize("change", ["requirements file", "file it includes",
                                    "local requirement", "image file", "other image",
                                    "mounts"])
def test_anything_different_is_imported_and_installed_again(
        make_spec: SpecFactory, tmp_path: Path, change: str) -> None:
    fake = FakeCluster()
    image = _image(tmp_path)
    spec = _spec(make_spec, tmp_path, image)
    _run(spec, fake)
    repo = tmp_path / "repo"
    if change == "requirements file":
        (repo / "requirements-dev.txt").write_text("-r requirements-test.txt\n./devtool\nx\n")
    elif change == "file it includes":
        (repo / "requirements-test.txt").write_text("pytest==8\n")
    elif change == "local requirement":
        (repo / "devtool" / "tool.py").write_text("X = 2\n")
    elif change == "image file":
        image.write_bytes(b"two, longer")
    elif change == "other image":
        spec = _spec(make_spec, tmp_path, _image(tmp_path, "img2.sqsh"))
    else:
        os.makedirs(tmp_path / "data", exist_ok=True)
        spec = _spec(make_spec, tmp_path, image, container_mounts=f"{tmp_path}/data:/data")
    m, steps = _run(spec, fake)
    assert (m.path, m.container_setup, len(_pips(steps))) == (COLD, SETUP_COLD, 2)
    assert fake.nodes["node01"].containers["llama"].image == spec.docker_image


def test_a_key_on_one_node_of_two_is_not_enough(make_spec: SpecFactory,
                                                  tmp_path: Path) -> None:
    fake = FakeCluster()
    spec = _spec(make_spec, tmp_path, _image(tmp_path), slurm_params={"nodes": 2},
                 image_cache_max_gb=0)  # no image cache: the nodes' containers alone
    _run(spec, fake)
    fake.nodes["node02"].containers["llama"].setup_key = ""
    m, steps = _run(spec, fake)
    assert (m.path, len(_pips(steps))) == (COLD, 2)


def test_an_image_named_by_tag_is_never_reused_and_costs_no_check(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    fake = FakeCluster()
    spec = _spec(make_spec, tmp_path, "nvcr.io/nvidia/pytorch:24.05-py3")
    _run(spec, fake)
    m, steps = _run(spec, fake)
    assert m.path == COLD
    assert not any(slurmcli.SETUP_KEY_READ in s for s in steps)


def test_an_interrupted_install_leaves_no_key(make_spec: SpecFactory,
                                              tmp_path: Path) -> None:
    """The key is written after the last install command: an install that failed
    leaves a container the next allocation imports again."""
    fake = FakeCluster()
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    fake.on_step("requirements-dev.txt", StepResult(1, "", "ERROR: No matching distribution\n"))
    m = AllocationMachine(spec, fake, clock=fake.clock)  # type: ignore[arg-type]
    assert m.prepare().state is State.Failed
    assert fake.nodes["node01"].containers["llama"].setup_key == ""


def test_the_fake_keeps_the_key_in_the_container(tmp_path: Path) -> None:
    """A fresh import starts without a key; the key needs a writable container."""
    from slurm_fsm.backend import AllocationRequest, ContainerOptions
    from slurm_fsm.duration import Duration

    fake = FakeCluster()
    job = fake.allocate(AllocationRequest(partition="batch", account="acct", nodes=1,
                                          time_limit=Duration.parse("01:00:00"),
                                          job_name="x", log_path=tmp_path / "s.log"))
    fake.clock.sleep(1)

    def step(argv: list[str], **opts: object) -> str:
        result = fake.run_step(StepRequest(job_id=job, argv=tuple(argv), nodes=1,
                                           container=ContainerOptions(name="c", **opts)))  # type: ignore[arg-type]
        return f"{result.exit_code} {result.stdout.strip()}"

    assert step(["true"], image="/i.sqsh", fresh=True) == "0 "
    assert step(slurmcli.setup_key_read_argv()) == f"0 {slurmcli.SETUP_KEY_LINE} node01 -"
    assert step(slurmcli.setup_key_write_argv("ab" * 16)).startswith("1")
    assert step(slurmcli.setup_key_write_argv("ab" * 16), writable=True) == "0 "
    assert step(slurmcli.setup_key_read_argv()) == (
        f"0 {slurmcli.SETUP_KEY_LINE} node01 {'ab' * 16}")
    assert step(["true"], image="/i.sqsh", fresh=True) == "0 "
    assert step(slurmcli.setup_key_read_argv()).endswith(" -")


# --------------------------------------------------------------------- the key itself


def test_the_key_follows_every_input(make_spec: SpecFactory, tmp_path: Path) -> None:
    image = _image(tmp_path)
    spec = _spec(make_spec, tmp_path, image)
    repo = tmp_path / "repo"
    seen = set()

    def key() -> str:
        k = setupkey.setup_key(spec)
        assert k is not None
        return k.key

    seen.add(key())
    assert key() in seen  # stable
    for path, text in (("requirements-test.txt", "pytest==9\n"), ("setup.py", "x\n"),
                       ("devtool/new.py", ""), ("devtool/pyproject.toml", "y\n"),
                       ("pyproject.toml", "z\n")):
        (repo / path).write_text(text)
        assert key() not in seen, path
        seen.add(key())
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
    assert key() in seen  # a repository without a commit: the same as none
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "--allow-empty", "-m", "x"], check=True, timeout=30)
    assert key() not in seen  # the commit is an input


def test_images_without_identity_and_specs_without_install_have_no_key(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    assert setupkey.image_identity("nvcr.io/nvidia/pytorch:24.05-py3") is None
    pinned = "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64
    assert setupkey.image_identity(pinned) == "digest sha256:" + "a" * 64
    assert setupkey.image_identity(str(tmp_path / "missing.sqsh")) is None
    assert setupkey.setup_key(_spec(make_spec, tmp_path, "x/y:1")) is None
    skip = _spec(make_spec, tmp_path, _image(tmp_path), workflow_type="custom",
                 skip_install=True)
    assert setupkey.setup_key(skip) is None
    assert setupkey.setup_key(_spec(make_spec, tmp_path, pinned)) is not None


def test_a_local_requirement_too_big_to_hash_has_no_key(
        make_spec: SpecFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    monkeypatch.setattr(setupkey, "MAX_TREE_FILES", 1)
    assert setupkey.setup_key(spec) is None


def test_a_setup_key_is_hex_before_it_reaches_a_command_line() -> None:
    with pytest.raises(ValueError, match="lowercase hex"):
        slurmcli.setup_key_write_argv("$(reboot)")
    assert slurmcli.setup_keys(f"{slurmcli.SETUP_KEY_LINE} n1 abc\nnoise\n"
                               f"{slurmcli.SETUP_KEY_LINE} n2 -\n") == {"n1": "abc", "n2": "-"}


def test_the_report_says_which_path_step_0_took_and_how_long_each_part_took(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    from slurm_fsm.executor import Executor
    from slurm_fsm.results import Status
    from slurm_fsm.testing import FakeScript

    fake = FakeCluster()
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    fake.script(spec.script_path, FakeScript(lines=["ok"]))
    cold = Executor(spec, fake, clock=fake.clock).run()
    assert cold.status is Status.PASSED, cold.summary
    assert {"queue_wait_s", "import_s", "install_s"} <= set(cold.timings)
    assert "reuse_check_s" not in cold.timings
    assert any(n.startswith("container 'llama': cold on node01 (queue wait ") for n in cold.notes)
    assert "  container:   cold: import 0.0s, install 0.0s" in cold.render_text()
    Executor(attrs.evolve(spec, release_allocation=True), fake, clock=fake.clock).run()
    warm = Executor(spec, fake, clock=fake.clock).run()
    assert warm.status is Status.PASSED, warm.summary
    assert {"queue_wait_s", "reuse_check_s"} <= set(warm.timings)
    assert not {"import_s", "install_s"} & set(warm.timings)
    assert any(n.startswith("container 'llama': reused on node on node01 (") for n in warm.notes)
    assert "  container:   reused on node: reuse check 0.0s" in warm.render_text()
    again = Executor(spec, fake, clock=fake.clock).run()  # the same allocation: no setup
    assert not {"queue_wait_s", "reuse_check_s", "import_s"} & set(again.timings)
    assert "container:" not in again.render_text()


def test_a_check_that_times_out_falls_back_to_the_import(
        make_spec: SpecFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_fsm.errors import CommandTimedOut

    fake = FakeCluster()
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    _run(spec, fake)
    real = fake.run_step

    def slow(request: StepRequest) -> StepResult:
        if slurmcli.SETUP_KEY_READ in request.argv:
            raise CommandTimedOut(list(request.argv), 300.0)
        return real(request)

    monkeypatch.setattr(fake, "run_step", slow)
    m, steps = _run(spec, fake)
    assert (m.path, m.container_setup, len(_pips(steps))) == (COLD, SETUP_COLD, 2)


def test_a_reused_container_is_no_measure_of_what_setting_one_up_takes(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    """The warm successor's lead time (p90 of the history's import and install) is what
    a cold setup costs: a run that reused the node's container measured no import."""
    from slurm_fsm.executor import Executor
    from slurm_fsm.history import RunHistory
    from slurm_fsm.paths import StatePaths
    from slurm_fsm.testing import FakeScript

    fake = FakeCluster()
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    fake.script(spec.script_path, FakeScript(lines=["ok"]))
    Executor(spec, fake, clock=fake.clock).run()
    Executor(attrs.evolve(spec, release_allocation=True), fake, clock=fake.clock).run()
    warm = Executor(spec, fake, clock=fake.clock).run()
    assert "reuse_check_s" in warm.timings
    cold, reused = RunHistory(StatePaths.for_state_file(spec.state_path).history).entries()
    assert cold.import_s is not None and cold.install_s is not None
    assert (reused.import_s, reused.install_s) == (None, None)
    assert reused.queue_wait_s is not None
