"""The container path (procedure.md 0E/0F) on real pyxis + enroot, 2 nodes.

The local cluster builds pyxis and enroot from the vendored sources and makes its test
images without a registry (``ClusterInfo.containers``). Without the sources these tests
skip with one line; with them they run and fail, never skip. Every container they make
is removed again (:class:`~tests.integration.containers.ContainerNames`), every job
cancelled (:class:`~tests.integration.helpers.JobNames`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from slurm_fsm import slurmcli
from slurm_fsm.executor import Executor
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm.step0.table import State
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev.localcluster import ClusterInfo, ContainerInfo

from .containers import ContainerNames, in_container, make_install_repo
from .helpers import JobNames, RecordingBackend, job_state, make_spec, slurm, wait_gone

pytestmark = pytest.mark.slurm

NODES = 2



def container_spec(cluster: ClusterInfo, root: Path, job_name: str, *, image: Path,
                   name: str, install: bool = False, **over: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "docker_image": str(image), "container_name": name,
        "slurm_params": {"nodes": NODES},
    }
    if install:
        repo = make_install_repo(root / "repo")
        fields.update(workflow_type="pytest", container_mounts=f"{repo}:{repo}")
    else:
        fields.update(workflow_type="custom", skip_install=True)
    fields.update(over)
    return make_spec(cluster, root, job_name, **fields)


def prepared(spec: JobSpec, backend: RecordingBackend | None = None
             ) -> tuple[AllocationMachine, RecordingBackend]:
    backend = backend or RecordingBackend()
    m = AllocationMachine(spec, backend)
    assert m.prepare().state is State.Ready, (m.path, m.failure)
    assert m.alloc is not None
    return m, backend


def imports(backend: RecordingBackend) -> list[tuple[str, ...]]:
    return [a for a in backend.argvs if any(x.startswith("--container-image=") for x in a)]


def installs(backend: RecordingBackend) -> list[tuple[str, ...]]:
    return [a for a in backend.argvs if "pip" in a]


def image_ids(m: AllocationMachine, backend: RecordingBackend, name: str) -> list[str]:
    assert m.alloc is not None
    result = in_container(backend, m.alloc.job_id, NODES, name, "cat", "/etc/image-id")
    assert result.exit_code == 0, result.stderr
    return sorted(result.stdout.split("\n")[:-1])


def test_first_run_imports_on_every_node_and_installs(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    name = cnames.new("first")
    spec = container_spec(local_cluster, tmp_path, names.new("ct-first"),
                          image=pyxis.images["python"], name=name, install=True)
    m, backend = prepared(spec)
    assert m.path == ["NoState", "Allocating", "Importing", "Installing", "Ready"]
    assert len(imports(backend)) == 1 and len(installs(backend)) == 2
    assert sorted(cnames.on_nodes(name)) == ["n1", "n2"]  # a copy on each node
    state = json.loads(spec.state_path.read_text())
    assert state["container_name"] == name and state["installed"] is True
    assert m.alloc is not None
    seen = in_container(backend, m.alloc.job_id, NODES, name, "python3", "-c",
                        "import it_demo, it_devtool, socket; "
                        "print(socket.gethostname(), open('/etc/image-id').read().strip(), "
                        "it_demo.MARKER, it_devtool.MARKER)", mounts=spec.mounts_text)
    assert seen.exit_code == 0, seen.stderr
    assert sorted(seen.stdout.splitlines()) == [
        "n1 python image installed-from-repo devtool",
        "n2 python image installed-from-repo devtool",
    ]


def test_repeated_run_imports_and_installs_nothing(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    name = cnames.new("again")
    spec = container_spec(local_cluster, tmp_path, names.new("ct-again"),
                          image=pyxis.images["python"], name=name, install=True)
    first, _ = prepared(spec)
    m, backend = prepared(spec)
    assert m.path == ["NoState", "Validating", "Ready"]
    assert m.alloc is not None and first.alloc is not None
    assert m.alloc.job_id == first.alloc.job_id
    assert imports(backend) == [] and installs(backend) == []
    assert not any(a[0] == "srun" for a in backend.argvs if "nvidia-smi" not in " ".join(a))
    seen = in_container(backend, m.alloc.job_id, NODES, name, "python3", "-c",
                        "import it_demo; print(it_demo.MARKER)", mounts=spec.mounts_text)
    assert seen.stdout.splitlines() == ["installed-from-repo"] * NODES, seen.stderr


def test_container_switch_imports_only_the_new_one(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    job_name = names.new("ct-switch")
    old, new = cnames.new("old"), cnames.new("new")
    first, _ = prepared(container_spec(local_cluster, tmp_path, job_name,
                                       image=pyxis.images["busybox"], name=old))
    spec = container_spec(local_cluster, tmp_path, job_name, image=pyxis.images["busybox"],
                          name=new)
    m, backend = prepared(spec)
    assert m.path == ["NoState", "Validating", "Importing", "Ready"]
    assert m.alloc is not None and first.alloc is not None
    assert m.alloc.job_id == first.alloc.job_id
    [imported] = imports(backend)
    assert f"--container-name={new}:create" in imported
    assert not any(f"--container-name={old}" in " ".join(a) for a in backend.argvs)
    assert sorted(cnames.on_nodes(new)) == ["n1", "n2"]
    assert sorted(cnames.on_nodes(old)) == ["n1", "n2"]  # left as it was
    assert json.loads(spec.state_path.read_text())["container_name"] == new


def test_container_switch_with_install_installs_in_the_new_one_only(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    """0F with installs: the new container is imported and installed into; the old
    one keeps its packages; the allocation is the same."""
    job_name = names.new("ct-switch-install")
    old, new = cnames.new("old-i"), cnames.new("new-i")
    # the image cache off: the switch's own install is what is tested (with it, the new
    # container comes from the cache installed: tests/integration/test_image_cache_real.py)
    first, _ = prepared(container_spec(local_cluster, tmp_path, job_name,
                                       image=pyxis.images["python"], name=old, install=True,
                                       image_cache_max_gb=0))
    spec = container_spec(local_cluster, tmp_path, job_name, image=pyxis.images["python"],
                          name=new, install=True, image_cache_max_gb=0)
    m, backend = prepared(spec)
    assert m.path == ["NoState", "Validating", "Importing", "Installing", "Ready"]
    assert m.alloc is not None and first.alloc is not None
    assert m.alloc.job_id == first.alloc.job_id
    assert len(imports(backend)) == 1 and len(installs(backend)) == 2
    assert all(f"--container-name={new}" in " ".join(a) for a in installs(backend))
    state = json.loads(spec.state_path.read_text())
    assert state["container_name"] == new and state["installed"] is True
    for name in (old, new):
        seen = in_container(backend, m.alloc.job_id, NODES, name, "python3", "-c",
                            "import it_demo; print(it_demo.MARKER)", mounts=spec.mounts_text)
        assert seen.stdout.splitlines() == ["installed-from-repo"] * NODES, seen.stderr


def test_image_change_gets_the_new_image_despite_an_old_container_of_that_name(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    """pyxis keeps a named container after its job and silently reuses it for a new
    --container-image: the import must not let the old one through."""
    job_name = names.new("ct-image")
    name = cnames.new("img")
    first, backend = prepared(container_spec(local_cluster, tmp_path, job_name,
                                             image=pyxis.images["busybox"], name=name))
    assert image_ids(first, backend, name) == ["hello from image"] * NODES
    spec = container_spec(local_cluster, tmp_path, job_name, image=pyxis.images["busybox2"],
                          name=name)
    m, backend = prepared(spec)
    assert m.path == ["NoState", "Validating", "Incompatible", "Allocating", "Importing",
                      "Ready"]
    assert m.alloc is not None and first.alloc is not None
    assert m.alloc.job_id != first.alloc.job_id
    assert image_ids(m, backend, name) == ["hello from image2"] * NODES


@pytest.mark.parametrize("how", ["release", "expiry"])
def test_new_allocation_does_not_inherit_an_old_container(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path, how: str) -> None:
    """Same image and name: a new allocation still starts from a fresh container,
    not from the one an earlier allocation left (with its writes) on the nodes."""
    job_name = names.new(f"ct-{how}")
    name = cnames.new(how)
    spec = container_spec(local_cluster, tmp_path, job_name, image=pyxis.images["busybox"],
                          name=name, alloc_time_limit="00:30:00")
    first, backend = prepared(spec)
    assert first.alloc is not None
    if how == "expiry":  # 5 minutes left: the next run cancels it as expiring
        cut = slurm("scontrol", "update", f"jobid={first.alloc.job_id}", "timelimit=00:05:00")
        assert cut.returncode == 0, cut.stderr
    wrote = in_container(backend, first.alloc.job_id, NODES, name, "sh", "-c",
                         "echo left-behind > /stale", writable=True)
    assert wrote.exit_code == 0, wrote.stderr
    if how == "release":
        gone = AllocationMachine(container_spec(
            local_cluster, tmp_path, job_name, image=pyxis.images["busybox"], name=name,
            release_allocation=True), RecordingBackend())
        assert gone.prepare().state is State.Released
        wait_gone(first.alloc.job_id)
    m, backend = prepared(spec)
    expected = (["NoState", "Allocating", "Importing", "Ready"] if how == "release" else
                ["NoState", "Validating", "Expiring", "Allocating", "Importing", "Ready"])
    assert m.path == expected
    assert m.alloc is not None and m.alloc.job_id != first.alloc.job_id
    seen = in_container(backend, m.alloc.job_id, NODES, name, "sh", "-c",
                        "cat /stale 2>/dev/null || echo fresh")
    assert seen.stdout.splitlines() == ["fresh"] * NODES, seen.stderr


def test_read_only_without_writable(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    name = cnames.new("ro")
    m, backend = prepared(container_spec(local_cluster, tmp_path, names.new("ct-ro"),
                                         image=pyxis.images["busybox"], name=name))
    assert m.alloc is not None
    seen = in_container(backend, m.alloc.job_id, NODES, name, "touch", "/x")
    assert seen.exit_code == 1 and "Read-only file system" in seen.stderr


def test_no_container_left_by_cleanup(pyxis: ContainerInfo) -> None:
    """The check the session ends with sees containers (it is not blind)."""
    c = ContainerNames(pyxis)
    name = c.new("probe")
    d = pyxis.state_dir / "0" / "n1" / "data" / f"pyxis_{name}"
    d.mkdir(parents=True)
    assert c.leftovers() == [d]
    c.cleanup()
    assert not d.exists()


# ----------------------------------------------------------------- errors from pyxis

def _error_case(case: str, root: Path, pyxis: ContainerInfo) -> tuple[dict[str, Any], str, str]:
    """Spec fields, a line the report's errors must hold, the diagnosis symptom."""
    if case == "missing image":
        image = root / "nope.sqsh"
        return ({"docker_image": str(image)},
                f"pyxis: failed to create container filesystem for image: {image}",
                "pyxis: failed to create container filesystem for image")
    if case == "not a path":
        return ({"docker_image": "registry.invalid/it/nope:1"},
                "pyxis: failed to import docker image: registry.invalid#it/nope:1",
                "pyxis: failed to import docker image")
    if case == "missing mount source":
        source = root / "no-such-dir"
        return ({"container_mounts": f"{source}:/x"},
                f"pyxis: --container-mounts: source path does not exist: {source}",
                "pyxis: --container-mounts: source path does not exist")
    repo = make_install_repo(root / "repo")
    (repo / "requirements-dev.txt").write_text("./no-such-package\n")
    return ({"workflow_type": "pytest", "skip_install": False,
             "container_mounts": f"{repo}:{repo}", "docker_image": str(pyxis.images["python"])},
            "pip install -r requirements-dev.txt failed with exit code 1",
            "pip install failed in the container")


@pytest.mark.parametrize("case", ["missing image", "not a path", "missing mount source",
                                  "failed install"])
def test_pyxis_errors_become_clear_reports(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path, case: str) -> None:
    name = cnames.new("err")
    over, line, symptom = _error_case(case, tmp_path, pyxis)
    over.setdefault("docker_image", str(pyxis.images["busybox"]))
    image = over.pop("docker_image")
    spec = container_spec(local_cluster, tmp_path, names.new("ct-err"), image=Path(image),
                          name=name, **over)
    spec = attrs.evolve(spec, docker_image=image)
    report = Executor(spec, SubprocessBackend()).run()
    assert report.status is Status.ERROR, report.summary
    assert any(e.startswith(line) for e in report.errors), report.errors
    assert symptom in [row["symptom"] for row in report.diagnosis], report.diagnosis
    # the allocation stays (an import or install is retried in it), the state file
    # says what was done
    state = json.loads(spec.state_path.read_text())
    assert job_state(state["job_id"]) == "RUNNING"
    if case == "failed install":
        assert state["container_name"] == name and state["installed"] is False
    else:  # nothing imported: the next run imports (fresh) again
        assert state["container_name"] is None


# ----------------------------------------------------------------- mounts, jobs, one-shot

def test_mount_warm_up_on_real_mounts(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "weights.bin").write_text("w\n")
    name = cnames.new("mount")
    spec = container_spec(local_cluster, tmp_path, names.new("ct-mount"),
                          image=pyxis.images["busybox"], name=name,
                          container_mounts=f"{data}:/data:ro")
    m, backend = prepared(spec)
    # one srun, one ls loop over the targets, in the container (procedure.md 0E.2)
    warm = [a for a in backend.argvs if a[-3:] == slurmcli.mount_warmup_argv(["/data"])]
    assert len(warm) == 1 and f"--container-mounts={data}:/data:ro" in warm[0]
    assert not [w for w in m.warnings if "mount warm-up" in w]  # every ls succeeded
    assert m.alloc is not None
    seen = in_container(backend, m.alloc.job_id, NODES, name, "cat", "/data/weights.bin",
                        mounts=spec.mounts_text)
    assert seen.stdout.splitlines() == ["w"] * NODES, seen.stderr


def test_multi_node_job_with_container_name(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    name = cnames.new("job")
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\nsrun -N 2 --ntasks-per-node=1 "
                      f"--container-name={name} sh -c 'echo \"$(hostname) $(cat /etc/image-id)\"'"
                      "\necho '1 passed in 0.01s'\n")
    spec = container_spec(local_cluster, tmp_path, names.new("ct-job"),
                          image=pyxis.images["busybox2"], name=name)
    report = Executor(spec, SubprocessBackend()).run()
    assert report.status is Status.PASSED, (report.summary, report.errors)
    log = spec.persistent_log.read_text().splitlines()
    assert sorted(line for line in log if "hello" in line) == [
        "n1 hello from image2", "n2 hello from image2"]


def test_one_shot_sbatch_with_containers(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    name = cnames.new("oneshot")
    job_name = names.new("ct-oneshot", suffix="")
    image = pyxis.images["busybox"]
    script = tmp_path / "oneshot.slurm"
    script.write_text(
        "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=1\n"
        f"#SBATCH --output={tmp_path}/work/oneshot-%j.out\n"
        f"srun --container-image={image} --container-name={name} "
        "sh -c 'echo \"$(hostname) $(cat /etc/image-id)\"'\n")
    spec = make_spec(local_cluster, tmp_path, job_name, persistent_mode=False,
                     script_path=str(script), workflow_type="custom",
                     log_file_pattern="oneshot-%j.out",
                     docker_image=str(image), container_name=name)
    report = Executor(spec, SubprocessBackend()).run()
    assert report.status is Status.PASSED, (report.summary, report.errors)
    out = next((tmp_path / "work").glob("oneshot-*.out")).read_text().splitlines()
    assert sorted(out) == ["n1 hello from image", "n2 hello from image"]


def test_two_runs_at_once_that_need_one_import_and_install_do_them_once(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    """Issue 18: two runs started together on one repo_root, both needing the same
    fresh container with its installs: step 0 is under the lock, so one run imports and
    installs and the other finds it installed (the state file), and both PASS in it."""
    job_name = names.new("ct-twice")
    name = cnames.new("twice")
    # custom (its verdict is the exit code) with the installs of step 0E
    spec = container_spec(local_cluster, tmp_path, job_name, image=pyxis.images["python"],
                          name=name, install=True, workflow_type="custom",
                          skip_install=False)
    spec.script_path.write_text(
        f"#!/bin/bash\nsrun -N{NODES} --ntasks-per-node=1 --container-name={name} "
        f"--container-mounts={spec.mounts_text} "  # the editable install's source
        "python3 -c 'import it_demo; print(it_demo.MARKER)'\n")
    paths = []
    for i in range(2):
        data = attrs.evolve(spec, work_dir=tmp_path / f"work{i}").to_dict()
        path = tmp_path / f"spec{i}.json"
        path.write_text(json.dumps(data, default=str))
        paths.append(path)
    env = {**os.environ, "SLURM_CONF": str(local_cluster.slurm_conf)}
    procs = [subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run", str(p), "--json",
                               "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for p in paths]
    try:
        reports = [json.loads(p.communicate(timeout=300)[0] or "{}") for p in procs]
        assert [r.get("status") for r in reports] == ["PASSED", "PASSED"], \
            [r.get("summary") for r in reports]
        assert len({r["allocation_id"] for r in reports}) == 1
        taken = [r["path"] for r in reports]
        assert sum("Importing" in t for t in taken) == 1, taken  # imported once
        assert sum("Installing" in t for t in taken) == 1, taken  # installed once
        for r in reports:  # both ran in the installed container, on every node
            out = Path(r["log_files"]["stdout"]).read_text()
            assert out.count("installed-from-repo") == NODES, out
    finally:
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(paths[0]),
                        "--quiet"], env=env, timeout=120, check=False, capture_output=True)
