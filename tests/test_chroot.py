"""The pure parts of the Debian 13 chroot (slurm_fsm_dev.chroot); making the root and
running the real suite in it are `make test-2411`."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from slurm_fsm_dev import chroot

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
90 27 0:21 / /var/cache/slurm_fsm/trixie-root/proc rw - proc proc rw
91 27 0:22 / /var/cache/slurm_fsm/trixie-root/sys rw - sysfs sysfs rw
92 91 0:28 / /var/cache/slurm_fsm/trixie-root/sys/fs/cgroup rw - tmpfs tmpfs rw
93 27 0:6 / /var/cache/slurm_fsm/trixie-root/dev rw - devtmpfs devtmpfs rw
94 27 254:0 /work /var/cache/slurm_fsm/trixie-root/work rw - ext4 /dev/vda rw
95 27 254:0 /opt/a\\040b /var/cache/slurm_fsm/trixie-root/opt/a\\040b ro - ext4 /dev/vda rw
96 27 254:0 / /var/cache/slurm_fsm/trixie-root-other/proc rw - ext4 /dev/vda rw
"""


def test_mount_points_under_the_root_deepest_first() -> None:
    root = Path("/var/cache/slurm_fsm/trixie-root")
    points = chroot.mount_points(root, MOUNTINFO)
    assert set(points) == {root / "proc", root / "sys", root / "sys/fs/cgroup",
                           root / "dev", root / "work", root / "opt/a b"}
    # a submount goes before its parent; another root with the same prefix is not ours
    assert points.index(root / "sys/fs/cgroup") < points.index(root / "sys")
    assert Path("/var/cache/slurm_fsm/trixie-root-other/proc") not in points
    assert Path("/proc") not in points


def test_pip_settings_from_pip_config_list() -> None:
    listing = (":env:.cert='/etc/ssl/certs/ca-certificates.crt'\n"
               ":env:.find-links='/opt/wheels'\n"
               "global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
               "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'\n"
               "global.constraint='/etc/xdg/pip/constraints.txt'\n"
               "not a setting\n")
    assert chroot.pip_settings(listing, env_only=True) == {
        "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt", "PIP_FIND_LINKS": "/opt/wheels"}
    assert chroot.pip_settings(listing) == {
        "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt",
        "PIP_FIND_LINKS": "/opt/wheels",
        "PIP_EXTRA_INDEX_URL": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
        "PIP_CONSTRAINT": "/etc/xdg/pip/constraints.txt",
    }


def test_inner_env_is_the_hosts_pip_and_nothing_else_of_the_caller(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRET_OF_THE_CALLER", "x")
    mirror = tmp_path / "mirror"
    (mirror / "simple").mkdir(parents=True)
    ca = tmp_path / "ca.crt"
    ca.write_text("CERT")
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<=2\n")
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\n")
    root = tmp_path / "root"
    listing = (f":env:.cert='{ca}'\n:env:.default-timeout='180'\n"
               f"global.extra-index-url='file://{mirror}/simple'\n"
               f"global.constraint='{constraints}'\n")
    env, dirs = chroot.inner_env(root, listing, local_dir="/tmp/x-2411", config_files=[conf])
    # the environment's settings as they are; the files they and the config name are
    # copied in at the same paths, with the config file itself
    assert env["PIP_CERT"] == str(ca) and env["PIP_DEFAULT_TIMEOUT"] == "180"
    for f in (ca, constraints, conf):
        assert (root / f.relative_to("/")).read_text() == f.read_text()
    # a config file's settings stay in the config file (a job's container has none)
    assert "PIP_CONSTRAINT" not in env and "PIP_EXTRA_INDEX_URL" not in env
    assert dirs == [mirror]  # the index links to ../../files: the whole mirror
    assert env["SLURM_FSM_LOCAL_DIR"] == "/tmp/x-2411"
    assert env["PATH"] == chroot.CHROOT_PATH
    assert "SECRET_OF_THE_CALLER" not in env


def test_chroot_argv_pivots_into_the_root_and_runs_env_minus_i_in_the_checkout() -> None:
    argv = chroot.chroot_argv(Path("/r oot"), {"B": "2", "A": "1"}, Path("/work/my tree"),
                              ["pytest", "-m", "slurm"])
    # a mount namespace whose root is the Debian 13 root: a user namespace is allowed
    # there (enroot needs one), where a chrooted process is refused one
    assert argv[:7] == ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh",
                        "-c"]
    enter = argv[7]
    assert enter.startswith("mount --rbind '/r oot' '/r oot' && cd '/r oot' && pivot_root . ")
    assert enter.endswith('exec /usr/bin/env -i "$@"')
    assert argv[8:11] == ["-", "A=1", "B=2"]
    assert argv[11:13] == ["/bin/bash", "-c"]
    assert argv[13] == "cd '/work/my tree' && exec \"$@\""
    assert argv[14:] == ["-", "pytest", "-m", "slurm"]


def test_the_2411_cluster_never_shares_a_host_clusters_folder() -> None:
    assert chroot.cluster_dir({}) == "/tmp/slurm_fsm-2411"
    assert chroot.cluster_dir({"SLURM_FSM_LOCAL_DIR": "/tmp/sfsm-trixie/"}) == \
        "/tmp/sfsm-trixie-2411"
    assert chroot.cluster_dir({"SLURM_FSM_LOCAL_DIR": "/tmp/slurm_fsm-local"}) != \
        "/tmp/slurm_fsm-local"


@pytest.mark.parametrize(("text", "missing"), [
    ("127.0.0.1 localhost\n", True),
    ("127.0.0.1 localhost\n127.0.0.1 vm\n", False),
    ("127.0.0.1 localhost vm.example vm\n", False),
    ("# 127.0.0.1 vm\n", True),
    ("127.0.0.1 vmx\n", True),
    ("vm 127.0.0.1\n", True),  # an address named vm is no entry for vm
])
def test_the_hosts_line_for_the_machines_name(text: str, missing: bool) -> None:
    assert chroot.hosts_line_missing(text, "vm") is missing


def test_a_half_made_root_is_not_complete(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    assert not chroot.is_complete(root)
    (root / ".slurm_fsm-complete").write_text("an older package list\n")
    assert not chroot.is_complete(root)  # the packages changed since: made again


def test_run_without_a_made_root_says_how_to_make_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(chroot.ENV_ROOT, str(tmp_path / "nothing"))
    assert chroot.main(["run", "--", "true"]) == 1
    assert "python -m slurm_fsm_dev.chroot make" in capsys.readouterr().err


def test_the_roots_hosts_name_the_machine_and_the_emulated_login_nodes_once(
        tmp_path: Path) -> None:
    """slurmctld 24.11 resolves the host an srun runs on; an emulated login node whose
    name does not resolve stalled the controller ("Socket timed out")."""
    (tmp_path / "etc").mkdir()
    hosts = tmp_path / "etc" / "hosts"
    hosts.write_text("127.0.0.1 localhost\n127.0.0.1 login-a")  # no newline at the end
    chroot._ensure_hosts(tmp_path)
    chroot._ensure_hosts(tmp_path)  # a second call adds nothing
    text = hosts.read_text()
    for name in (socket.gethostname(), *chroot.LOGIN_NODES):
        assert not chroot.hosts_line_missing(text, name), text
    assert text.count("login-a") == 1 and text.endswith("\n")
    assert text.startswith("127.0.0.1 localhost\n")


def test_each_release_has_a_root_a_venv_and_a_cluster_of_its_own() -> None:
    """24.11 and 26.05 side by side (and beside the host's 22.05): nothing shared."""
    trixie, sid = chroot.RELEASES["2411"], chroot.RELEASES["2605"]
    assert (trixie.suite, sid.suite) == ("trixie", "sid")
    assert trixie.default_root == Path("/var/cache/slurm_fsm/trixie-root")
    assert sid.default_root == Path("/var/cache/slurm_fsm/sid-root")
    assert (trixie.venv_name, sid.venv_name) == (".venv-trixie", ".venv-sid")
    assert trixie.env_root != sid.env_root
    own = {"SLURM_FSM_LOCAL_DIR": "/tmp/slurm_fsm-me"}
    dirs = {chroot.cluster_dir(own, release=r) for r in (trixie, sid)}
    assert dirs == {"/tmp/slurm_fsm-me-2411", "/tmp/slurm_fsm-me-2605"}
    assert chroot.cluster_dir({}, release=sid) == "/tmp/slurm_fsm-2605"


def test_the_venv_inside_is_the_releases_own(tmp_path: Path) -> None:
    binds = chroot._binds(tmp_path / "wt", [], chroot.SID.venv_name)
    assert (tmp_path / "wt" / ".venv-sid", tmp_path / "wt" / ".venv", False) in binds


def test_apt_in_the_sid_root_accepts_a_release_file_past_valid_until() -> None:
    """The registry's copy of unstable's Release file is past its Valid-Until; trixie's
    apt keeps its defaults."""
    root = Path("/r")
    update, install = chroot.apt_argvs(root, chroot.SID)
    for argv in (update, install):
        assert argv[:5] == ["chroot", "/r", "apt-get", "-o",
                            "Acquire::Check-Valid-Until=false"]
    assert update[-2:] == ["update", "-qq"] and "slurm-wlm" in install
    update, install = chroot.apt_argvs(root, chroot.TRIXIE)
    assert update == ["chroot", "/r", "apt-get", "update", "-qq"]


def test_a_root_of_another_release_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".slurm_fsm-debootstrap-done").write_text("trixie http://x\n")
    with pytest.raises(chroot.ChrootError, match="SLURM_FSM_SID_ROOT"):
        chroot._debootstrap(tmp_path, chroot.SID)


def test_the_sid_release_is_chosen_on_the_command_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(chroot.SID.env_root, str(tmp_path / "nothing"))
    monkeypatch.setenv(chroot.TRIXIE.env_root, str(tmp_path / "trixie"))
    assert chroot.main(["--release", "2605", "status"]) == 0
    out = capsys.readouterr().out
    assert f"root {tmp_path / 'nothing'}: not made" in out and "slurm_fsm-" in out
    assert "-2605" in out
    assert chroot.main(["--release", "2605", "run", "--", "true"]) == 1
    assert "python -m slurm_fsm_dev.chroot --release 2605 make" in capsys.readouterr().err
