"""The pure parts of the local cluster's pyxis set-up (the build itself runs in the
integration suite, where the cluster is started)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurm_fsm_dev import localcluster, localpyxis
from slurm_fsm_dev.localcluster import ClusterInfo, ContainerInfo


def info(tmp_path: Path, **over: object) -> ClusterInfo:
    fields: dict[str, object] = dict(
        slurm_conf=tmp_path / "etc/slurm.conf", base_dir=tmp_path, cluster_name="c",
        partition="debug", account="acct", other_account="other", nodes=["n1", "n2"],
        user="root", auth="munge", slurmctld_port=1, slurmdbd_port=2, log_dir=tmp_path / "log")
    fields.update(over)
    return ClusterInfo(**fields)  # type: ignore[arg-type]


def containers(tmp_path: Path) -> ContainerInfo:
    return ContainerInfo(
        plugin=tmp_path / "spank_pyxis.so", enroot=Path("/usr/local/bin/enroot"),
        images={"busybox": tmp_path / "img.sqsh"}, image_ids={"busybox": "hello from image"},
        state_dir=tmp_path / "enroot", build_dir=tmp_path, sources=tmp_path, build_seconds=0.4)


def test_cluster_info_round_trips_with_and_without_containers(tmp_path: Path) -> None:
    for i in (info(tmp_path), info(tmp_path, containers=containers(tmp_path)),
              info(tmp_path, containers_problem="no pyxis/enroot sources at /x")):
        assert ClusterInfo.from_json(i.to_json()) == i
    old = info(tmp_path).to_json()
    del old["containers"], old["containers_problem"]  # written before containers existed
    assert ClusterInfo.from_json(old).containers is None


def test_sources_absent_means_no_containers_and_an_empty_plugstack(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(localpyxis.ENV_SOURCES, str(tmp_path / "nowhere"))
    plugstack = tmp_path / "plugstack.conf"
    plugstack.write_text("stale\n")
    got, why = localpyxis.prepare(tmp_path, plugstack, say=lambda _m: None)
    assert got is None
    assert why.startswith(f"no pyxis/enroot sources at {tmp_path / 'nowhere'}")
    assert "SLURM_FSM_PYXIS_SRC" in why
    assert plugstack.read_text() == ""


def test_a_cluster_without_containers_is_restarted_once_the_sources_are_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    monkeypatch.setenv(localpyxis.ENV_SOURCES, str(src))
    old = info(tmp_path)
    assert localcluster._containers_problem(old) == ""  # no sources: fine as it is
    for f in localpyxis.SOURCE_FILES:
        (src / f).write_text("x")
    assert "started without containers" in localcluster._containers_problem(old)
    failed = info(tmp_path, containers_problem="pyxis/enroot build failed: boom")
    assert localcluster._containers_problem(failed) == ""  # not restarted at every look
    gone = info(tmp_path, containers=containers(tmp_path))
    assert "container files are gone" in localcluster._containers_problem(gone)


def test_a_cluster_brought_up_without_pyxis_by_make_demo_is_healthy_as_brought_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``make demo`` brings the cluster up with SLURM_FSM_LOCAL_CONTAINERS=if-built and
    builds no pyxis; ``scripts/local-slurm status`` (without that variable) called it
    "unhealthy". Status judges it as it was brought up; an ``up`` that wants
    containers still restarts it with them."""
    src = tmp_path / "src"
    src.mkdir()
    for f in localpyxis.SOURCE_FILES:
        (src / f).write_text("x")
    monkeypatch.setenv(localpyxis.ENV_SOURCES, str(src))
    monkeypatch.delenv(localpyxis.ENV_CONTAINERS, raising=False)
    demo = info(tmp_path, containers_problem=f"{localpyxis.NOT_BUILT} "
                f"({localpyxis.ENV_CONTAINERS}=if-built: nothing here needs a container)")
    assert localcluster._containers_problem(demo, as_brought_up=True) == ""
    assert "started without containers" in localcluster._containers_problem(demo)
    monkeypatch.setattr(localcluster, "_read_state", lambda _layout: (demo, []))
    monkeypatch.setattr(localcluster, "_check", _check_containers_only)
    monkeypatch.setattr(localcluster, "_node_states", lambda _env: {"n1": "idle"})
    monkeypatch.setattr(localcluster, "_run", lambda *_a, **_k: subprocess.CompletedProcess(
        [], 0, "", ""))
    assert localcluster.status().state == "up"


def _check_containers_only(info: ClusterInfo, _daemons: object, *,
                           as_brought_up: bool = False) -> list[str]:
    problem = localcluster._containers_problem(info, as_brought_up=as_brought_up)
    return [problem] if problem else []


def test_enroot_state_is_keyed_by_cluster_and_node(tmp_path: Path) -> None:
    """enroot evaluates each value in the job step: SLURM_CONF names the cluster,
    hostname the node."""
    conf = localpyxis.enroot_conf(Path("/tmp/fallback"))
    values = dict(line.split(" ", 1) for line in conf.splitlines() if line.startswith("ENROOT_"))
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": "/tmp/slurm_fsm-x/etc/slurm.conf"}
    out = subprocess.run(["bash", "-c", f'eval echo "{values["ENROOT_DATA_PATH"]}"'],
                         capture_output=True, text=True, env=env, timeout=10, check=True)
    host = subprocess.run(["hostname"], capture_output=True, text=True, timeout=10,
                          check=True).stdout.strip()
    uid = subprocess.run(["id", "-u"], capture_output=True, text=True, timeout=10,
                         check=True).stdout.strip()
    assert out.stdout.strip() == f"/tmp/slurm_fsm-x/enroot/{uid}/{host}/data"
    del env["SLURM_CONF"]
    out = subprocess.run(["bash", "-c", f'eval echo "{values["ENROOT_DATA_PATH"]}"'],
                         capture_output=True, text=True, env=env, timeout=10, check=True)
    assert out.stdout.strip() == f"/tmp/fallback/enroot/{uid}/{host}/data"


def test_plugstack_line() -> None:
    assert localpyxis.plugstack_line(Path("/p/spank_pyxis.so"), Path("/b/pyxis-run")) == (
        "required /p/spank_pyxis.so runtime_path=/b/pyxis-run container_scope=global\n")


# ------------------------------------------------- the python image's interpreter


def test_host_python_is_what_the_system_python_says() -> None:
    # the image holds the system's Python, whichever it is (3.11 on Debian 12, 3.13 on
    # Debian 13): its version and standard library come from the interpreter itself
    py = localpyxis.host_python()
    said = subprocess.run(
        ["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    assert py.version == said
    assert py.name == f"python{said}"
    assert py.executable.is_file() and py.executable.name == py.name
    assert (py.stdlib / "os.py").is_file()


def test_host_python_names_a_missing_interpreter(tmp_path: Path) -> None:
    with pytest.raises(localpyxis.ContainerBuildError, match="missing"):
        localpyxis.host_python(tmp_path / "python3")


def test_host_python_refuses_an_interpreter_that_prints_no_version(tmp_path: Path) -> None:
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho nonsense\n")
    fake.chmod(0o755)
    with pytest.raises(localpyxis.ContainerBuildError, match="for its version"):
        localpyxis.host_python(fake)


def test_no_python_version_is_written_into_the_image_recipe() -> None:
    # the class of defect (issue 23, K10): a hard-coded python3.NN in the recipe's code
    # (docstrings may name the versions of Debian's releases)
    import ast
    import re
    tree = ast.parse(Path(localpyxis.__file__).read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    literals = [node.value for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings]
    assert literals  # the walk saw the module's strings
    assert not [text for text in literals if re.search(r"python3\.\d+", text)]
