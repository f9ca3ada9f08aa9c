"""More real clusters: a Debian release's own Slurm, in a chroot (a root of its own).

Two releases (:data:`RELEASES`, chosen with ``--release``): Debian 13 ("trixie") with
Slurm 24.11 (``2411``, the default) and Debian unstable ("sid") with Slurm 26.05
(``2605``). ``python -m slurm_fsm_dev.chroot [--release KEY] make`` makes the release's
root file system once per machine (``debootstrap --variant=minbase SUITE`` from
Debian's registry into ``$SLURM_FSM_TRIXIE_ROOT`` / ``$SLURM_FSM_SID_ROOT``, default
``/var/cache/slurm_fsm/<suite>-root``, then the Debian packages of :data:`PACKAGES`).
Each stage leaves a marker file in the root; a root without the marker is half made
(an interrupted ``debootstrap``) and is made again from nothing. ``test`` runs the
real-Slurm suite (``pytest -m slurm``) inside it against a local cluster of its own;
``run -- CMD`` runs any command there; ``umount`` undoes the bind mounts, also after a
crash.

Inside the root, ``/proc``, ``/sys`` and ``/dev`` are the host's (bound), and so is the
checkout's parent folder (``/work``), at the same path: ``/work/<checkout>`` and
``/work/shared`` (the pyxis sources) are where they are on the host. The chroot's
Python gets a venv of its own in the checkout (``.venv-trixie``, ``.venv-sid``: which
is the checkout's ``.venv`` inside, so the README's commands work there as typed); pip
reaches the host's wheel mirror because the host's pip settings are passed explicitly (the
command runs under ``env -i``: nothing else of the caller's environment leaks in).

Each release's cluster has a base folder of its own (:func:`cluster_dir`): ``/proc`` is
the host's, and ``localcluster down`` ends the processes whose command line or
environment name the base folder, so a chroot cluster must never share a path with a
host cluster or the other release's. Its ports derive from that path too
(``localcluster``), so all three run side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from filelock import FileLock

__all__ = [
    "CHROOT_PATH",
    "DEFAULT_ROOT",
    "ENV_ROOT",
    "PACKAGES",
    "RELEASES",
    "SID",
    "TRIXIE",
    "ChrootError",
    "Release",
    "apt_argvs",
    "chroot_argv",
    "cluster_dir",
    "hosts_line_missing",
    "inner_env",
    "is_complete",
    "main",
    "make_root",
    "mount_points",
    "mounted",
    "pip_settings",
    "root_dir",
    "umount_all",
]

MIRROR = "http://deb.debian.org/debian"
#: What the real suite needs in the root: the cluster (Slurm 24.11 or 26.05, munge, MariaDB),
#: Python, chattr (e2fsprogs), man pages (man-db), the pyxis recipe's build deps
#: (setup-pyxis.sh would apt-get them itself, at every fresh root), the python image's
#: pip wheel, musl's loader for enroot's helpers, and the commands the tests and
#: localcluster call (ps, ip, git, ldd).
PACKAGES = (
    "slurm-wlm", "slurm-client", "slurmdbd", "munge", "mariadb-server",
    "python3", "python3-venv", "python3-pip-whl", "e2fsprogs", "man-db", "procps",
    "iproute2", "git", "ca-certificates", "util-linux", "less",
    "gcc", "make", "libc6-dev", "libslurm-dev", "libcap2-bin", "bc", "curl", "gawk", "jq",
    "squashfs-tools", "parallel", "zstd", "pigz", "fuse-overlayfs", "squashfuse",
    "busybox-static",
    # enroot's helpers (enroot-nsenter, ...) come out of the recipe dynamically linked
    # against musl on Debian 13 and unstable (static-pie on Debian 12): they need musl's loader
    "musl",
)
#: the PATH inside (``env -i`` drops the caller's)
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_DEBOOTSTRAP_MARK = ".slurm_fsm-debootstrap-done"
_COMPLETE_MARK = ".slurm_fsm-complete"
_USERS = ".slurm_fsm-users"  # pids of the processes that use the mounts (beside the root)
_DEBOOTSTRAP_TIMEOUT_S = 1800.0
_APT_TIMEOUT_S = 1800.0
_CMD_TIMEOUT_S = 30.0
#: The emulated login nodes of the two-login-node tests (tests/integration/
#: test_arbiter_real.py: a host name each, ``unshare --uts``). slurmctld 24.11 resolves
#: the name of the host an srun runs on to reach it (when a step is signalled or the job
#: cancelled) and stalls its RPCs about 10 s per unresolvable name (measured: node B's
#: ``release`` then failed "Socket timed out"); real login nodes resolve, so these do too.
LOGIN_NODES = ("login-a", "login-b")


@dataclasses.dataclass(frozen=True)
class Release:
    """A Debian release whose own Slurm the real suite runs on, in a root of its own.

    Everything of one release is apart from the others': the root
    (:attr:`default_root`, or ``$<env_root>``), the venv in the checkout
    (:attr:`venv_name`), the cluster's base folder and so its ports
    (:func:`cluster_dir`: ``-<key>``).
    """

    key: str  #: the Makefile's name of it (``make test-<key>``) and the cluster's suffix
    suite: str  #: debootstrap's and apt's name of the release
    debian: str  #: said in messages
    slurm: str  #: the Slurm it carries, said in messages (the root's dpkg says the exact)
    env_root: str  #: the variable that moves its root
    #: what apt-get needs beside its defaults for this suite's Release file
    apt_options: tuple[str, ...] = ()

    @property
    def default_root(self) -> Path:
        return Path(f"/var/cache/slurm_fsm/{self.suite}-root")

    @property
    def venv_name(self) -> str:
        return f".venv-{self.suite}"

    def cli(self, verb: str) -> str:
        """The command line that does ``verb`` for this release (for messages)."""
        flag = "" if self == TRIXIE else f" --release {self.key}"
        return f"python -m slurm_fsm_dev.chroot{flag} {verb}"


TRIXIE = Release("2411", "trixie", "Debian 13", "24.11", "SLURM_FSM_TRIXIE_ROOT")
#: Debian unstable. The registry's copy of its Release file is past its Valid-Until
#: date (unstable's is re-signed daily; trixie's lasts a week past each point release),
#: so apt refuses it without ``Check-Valid-Until=false``; its signature is still checked.
SID = Release("2605", "sid", "Debian unstable", "26.05", "SLURM_FSM_SID_ROOT",
              apt_options=("-o", "Acquire::Check-Valid-Until=false"))
RELEASES = {r.key: r for r in (TRIXIE, SID)}
#: the default release's (kept for callers of the Debian 13 names)
ENV_ROOT = TRIXIE.env_root
DEFAULT_ROOT = TRIXIE.default_root
VENV_NAME = TRIXIE.venv_name


class ChrootError(RuntimeError):
    """Making, mounting or entering a release's root failed."""


def _say(msg: str, release: Release = TRIXIE) -> None:
    print(f"{release.suite}-chroot: {msg}", flush=True)


def root_dir(release: Release = TRIXIE) -> Path:
    """``$<release.env_root>``, else ``/var/cache/slurm_fsm/<suite>-root``."""
    raw = os.environ.get(release.env_root, "").strip()
    return Path(raw).absolute() if raw else release.default_root


def cluster_dir(environ: Mapping[str, str] | None = None,
                release: Release = TRIXIE) -> str:
    """The release's cluster's base folder (inside the root's /tmp): never a host
    cluster's, nor another release's.

    ``$SLURM_FSM_LOCAL_DIR-<key>`` (``-2411``, ``-2605``) when the caller names a
    cluster of its own (engineers side by side each get one), else
    ``/tmp/slurm_fsm-<key>``.
    """
    env = os.environ if environ is None else environ
    own = env.get("SLURM_FSM_LOCAL_DIR", "").strip().rstrip("/")
    return f"{own}-{release.key}" if own else f"/tmp/slurm_fsm-{release.key}"


def checkout_dir() -> Path:
    """This checkout (the repo holding this module)."""
    return Path(__file__).resolve().parent.parent


def _run(argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
         check: bool = True, capture: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(  # noqa: S603 - an argument list
            list(argv), capture_output=capture, text=True, timeout=timeout, check=False,
            env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise ChrootError(f"{shlex.join(argv)}: timed out after {timeout:g}s") from exc
    except OSError as exc:
        raise ChrootError(f"{shlex.join(argv)}: {exc}") from exc
    if check and proc.returncode != 0:
        out = (proc.stdout or "") + (proc.stderr or "")
        tail = "\n".join(out.strip().splitlines()[-30:])
        raise ChrootError(f"{shlex.join(argv)}: exit {proc.returncode}:\n{tail}")
    return proc


# ---------------------------------------------------------------- mounts


def _unescape(field: str) -> str:
    """mountinfo escapes blanks and backslashes as octal (``\\040``)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit() and len(field[i + 1:i + 4]) == 3:
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points(root: Path, mountinfo: str | None = None) -> list[Path]:
    """Every mount point at or under ``root``, deepest first (the order to undo them)."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    prefix = str(root).rstrip("/")
    found: list[Path] = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        target = _unescape(fields[4])
        if target == prefix or target.startswith(prefix + "/"):
            found.append(Path(target))
    # deepest first; among equals, the later mount (on top) first
    order = {p: i for i, p in enumerate(found)}
    return sorted(set(found), key=lambda p: (-len(p.parts), -order[p]))


def umount_all(root: Path) -> list[Path]:
    """Undo every mount under ``root`` (works after a crash: it reads the mount table).

    Returns what is still mounted (empty when all went).
    """
    for _ in range(3):
        points = mount_points(root)
        if not points:
            return []
        for point in points:
            proc = _run(["umount", str(point)], timeout=_CMD_TIMEOUT_S, check=False)
            if proc.returncode != 0:  # busy: detach it, it goes when the last user does
                _run(["umount", "--lazy", str(point)], timeout=_CMD_TIMEOUT_S, check=False)
    return mount_points(root)


def _bind(src: Path, dest: Path, *, readonly: bool = False) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    _run(["mount", "--rbind", str(src), str(dest)], timeout=_CMD_TIMEOUT_S)
    # unmounting inside the root must never reach the host's own mounts
    _run(["mount", "--make-rslave", str(dest)], timeout=_CMD_TIMEOUT_S, check=False)
    if readonly:
        _run(["mount", "-o", "remount,bind,ro", str(dest)], timeout=_CMD_TIMEOUT_S,
             check=False)


def _binds(checkout: Path, extra_dirs: Sequence[Path], venv_name: str = VENV_NAME,
           ) -> list[tuple[Path, Path, bool]]:
    """(host folder, path inside, read-only), in the order to bind them.

    Host folders go at the same path inside; the checkout's ``.venv`` inside is its
    ``venv_name`` (:attr:`Release.venv_name`: ``.venv-trixie``, ``.venv-sid``): commands
    typed as the README has them (``source .venv/bin/activate``, ``make``) get the
    chroot's own Python there.
    """
    same = [Path("/proc"), Path("/sys"), Path("/dev"), checkout.parent]
    wanted = [(d, d, False) for d in same]
    for d in extra_dirs:
        if d.is_dir() and not any(d == w or w in d.parents for w in same[3:]):
            wanted.append((d, d, True))
    wanted.append((checkout / venv_name, checkout / ".venv", False))
    return wanted


def _users_file(root: Path) -> Path:
    return root.parent / f"{root.name}{_USERS}"


def _live_users(path: Path) -> set[int]:
    pids: set[int] = set()
    with contextlib.suppress(OSError):
        for word in path.read_text().split():
            if word.isdigit() and Path(f"/proc/{word}").exists():
                pids.add(int(word))
    return pids


@contextlib.contextmanager
def mounted(root: Path, *, checkout: Path | None = None, extra_dirs: Sequence[Path] = (),
            release: Release = TRIXIE) -> Iterator[None]:
    """The binds in place while the block runs; undone when this was their last user.

    Several processes may use one root at once (each registers its pid); the last one
    out undoes the mounts. A crashed user's pid is dropped when it is seen dead.
    """
    checkout = checkout or checkout_dir()
    lock = FileLock(str(root) + ".mount-lock", timeout=600)
    users = _users_file(root)
    with lock:
        pids = _live_users(users)
        if not pids:  # nobody uses them: whatever is there is left over from a crash
            umount_all(root)
        present = set(mount_points(root))
        for src, inside, readonly in _binds(checkout, extra_dirs, release.venv_name):
            dest = root / inside.relative_to("/")
            if dest not in present:
                src.mkdir(parents=True, exist_ok=True)
                _bind(src, dest, readonly=readonly)
        users.write_text(" ".join(str(p) for p in sorted(pids | {os.getpid()})) + "\n")
    try:
        yield
    finally:
        with lock:
            pids = _live_users(users) - {os.getpid()}
            users.write_text(" ".join(str(p) for p in sorted(pids)) + "\n")
            if not pids:
                left = umount_all(root)
                if left:
                    _say(f"still mounted: {', '.join(map(str, left))} "
                         f"(`{release.cli('umount')}` retries)", release)


# ---------------------------------------------------------------- the root


def _packages_key() -> str:
    return hashlib.sha256(" ".join(sorted(PACKAGES)).encode()).hexdigest()[:12]


def is_complete(root: Path) -> bool:
    mark = root / _COMPLETE_MARK
    return mark.is_file() and mark.read_text().strip() == _packages_key()


def hosts_line_missing(hosts_text: str, hostname: str) -> bool:
    """True when ``hosts_text`` (an /etc/hosts) has no line naming ``hostname``."""
    for line in hosts_text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and hostname in words[1:]:
            return False
    return True


def _ensure_pivot_dir(root: Path) -> None:
    (root / OLD_ROOT).mkdir(exist_ok=True)


def _ensure_hosts(root: Path) -> None:
    """The host's name and the emulated login nodes' (:data:`LOGIN_NODES`) in the root's
    /etc/hosts: slurmctld 24.11 and 26.05 resolve them (K9)."""
    hosts = root / "etc" / "hosts"
    text = hosts.read_text() if hosts.exists() else "127.0.0.1 localhost\n"
    missing = [n for n in (socket.gethostname(), *LOGIN_NODES) if hosts_line_missing(text, n)]
    if missing:
        if text and not text.endswith("\n"):
            text += "\n"
        hosts.write_text(text + "".join(f"127.0.0.1 {n}\n" for n in missing))


def _remove_root(root: Path) -> None:
    left = umount_all(root)
    if left:
        raise ChrootError(f"cannot remake {root}: still mounted: {', '.join(map(str, left))}")
    # --one-file-system: never into a mount that escaped the check above
    _run(["rm", "-rf", "--one-file-system", str(root)], timeout=600)


def apt_argvs(root: Path, release: Release) -> list[list[str]]:
    """The two apt-get calls that install :data:`PACKAGES` in ``root`` (update, install),
    with the release's own options (:attr:`Release.apt_options`) in both."""
    apt = ["chroot", str(root), "apt-get", *release.apt_options]
    return [[*apt, "update", "-qq"],
            [*apt, "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]]


def _debootstrap(root: Path, release: Release) -> None:
    """The base system, unless the marker says it is there (a root without the marker is
    half made: removed and made again). A marker of another suite is an error: two
    releases never share a root."""
    mark = root / _DEBOOTSTRAP_MARK
    if mark.is_file():
        made = (mark.read_text().split() or ["?"])[0]
        if made != release.suite:
            raise ChrootError(f"{root} holds Debian {made!r}, not {release.suite!r}: "
                              f"${release.env_root} must name a root of its own")
        return
    if root.exists():
        _say(f"{root} is half made (no {_DEBOOTSTRAP_MARK}): making it again", release)
        _remove_root(root)
    if shutil.which("debootstrap") is None:
        raise ChrootError("debootstrap is missing (apt-get install debootstrap)")
    t0 = time.monotonic()
    argv = ["debootstrap", "--variant=minbase", release.suite, str(root), MIRROR]
    _say(shlex.join(argv), release)
    _run(argv, timeout=_DEBOOTSTRAP_TIMEOUT_S)
    mark.write_text(f"{release.suite} {MIRROR}\n")
    _say(f"debootstrap done in {time.monotonic() - t0:.1f}s", release)


def make_root(root: Path, release: Release = TRIXIE) -> None:
    """debootstrap + the packages, once (idempotent; a half-made root is made again)."""
    if is_complete(root):
        _ensure_hosts(root)
        _say(f"{root} is complete (Slurm {_root_slurm_version(root)})", release)
        return
    if os.geteuid() != 0:
        raise ChrootError(f"making the {release.debian} root needs root (debootstrap, "
                          "chroot, mount)")
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".make-lock", timeout=_DEBOOTSTRAP_TIMEOUT_S + _APT_TIMEOUT_S):
        if is_complete(root):
            return
        _debootstrap(root, release)
        _ensure_hosts(root)
        # no daemon of a package starts inside the chroot at install time: the cluster
        # starts its own, under its own base folder
        policy = root / "usr" / "sbin" / "policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        t0 = time.monotonic()
        env = {"PATH": CHROOT_PATH, "LANG": "C.UTF-8", "HOME": "/root",
               "DEBIAN_FRONTEND": "noninteractive"}
        with mounted(root, release=release):
            for argv in apt_argvs(root, release):
                _run(argv, env=env, timeout=_APT_TIMEOUT_S)
        (root / _COMPLETE_MARK).write_text(_packages_key() + "\n")
        _say(f"packages installed in {time.monotonic() - t0:.1f}s "
             f"(Slurm {_root_slurm_version(root)})", release)


def _root_slurm_version(root: Path) -> str:
    """The root's Slurm version, from dpkg's status file (no chroot needed)."""
    status = root / "var" / "lib" / "dpkg" / "status"
    package = ""
    with contextlib.suppress(OSError):
        for line in status.read_text().splitlines():
            if line.startswith("Package: "):
                package = line.split(": ", 1)[1]
            elif line.startswith("Version: ") and package == "slurm-client":
                return line.split(": ", 1)[1]
    return "unknown"


# ---------------------------------------------------------------- pip and the env


def pip_settings(listing: str, *, env_only: bool = False) -> dict[str, str]:
    """``pip config list`` output -> the PIP_* variables that say the same.

    Lines look like ``global.find-links='/opt/wheels'`` (a config file) or
    ``:env:.cert='...'`` (the environment); the later line of a key wins (pip's own
    order: files, then the environment). ``env_only``: the environment's alone.
    """
    out: dict[str, str] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        if not sep or "." not in key or (env_only and not key.startswith(":env:")):
            continue
        name = key.rsplit(".", 1)[1].strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if name:
            out["PIP_" + name.upper().replace("-", "_")] = value
    return out


#: pip's machine-wide config files: copied into the root at the same path
PIP_CONFIG_FILES = (Path("/etc/pip.conf"), Path("/etc/xdg/pip/pip.conf"))


def _host_pip_listing() -> str:
    pip = [sys.executable, "-m", "pip", "config", "list"]
    proc = _run(pip, timeout=60, check=False)
    return proc.stdout if proc.returncode == 0 else ""


def _paths_in(value: str) -> list[str]:
    """The absolute paths (or file:// URLs' paths) among a pip value's words."""
    paths = []
    for word in value.split():
        path = word.removeprefix("file://")
        if path.startswith("/"):
            paths.append(path)
    return paths


def _copy_in(root: Path, path: Path) -> None:
    dest = root / path.relative_to("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, dest)


def inner_env(root: Path, pip_listing: str, *, local_dir: str,
              extra: Mapping[str, str] | None = None,
              config_files: Sequence[Path] = PIP_CONFIG_FILES,
              ) -> tuple[dict[str, str], list[Path]]:
    """The whole environment inside (``env -i``) and the host folders to bind for pip.

    pip inside is set up as the host's (``pip_listing``: ``pip config list``): its
    config files are copied in at the same paths, its environment's settings become
    the same ``PIP_*`` variables (a job's ``srun`` carries them into its container, as
    on the host), files any setting names (the CA bundle, the constraints) are copied
    in at the same paths, and folders (wheel mirrors; the folder above an index's
    ``simple``, whose pages link to ``../../files``) are bound read-only there.
    """
    env = {"HOME": "/root", "LANG": "C.UTF-8", "PATH": CHROOT_PATH,
           "SLURM_FSM_LOCAL_DIR": local_dir}
    for name, value in os.environ.items():
        # the project's own knobs go in (SLURM_FSM_KEEP_CLUSTER, ...); the cluster's
        # folder is the release's own, never the caller's
        if name == "TERM" or (name.startswith("SLURM_FSM_") and name not in (
                "SLURM_FSM_LOCAL_DIR", *(r.env_root for r in RELEASES.values()))):
            env[name] = value
    for conf in config_files:
        if conf.is_file():
            _copy_in(root, conf)
    dirs: list[Path] = []
    for value in pip_settings(pip_listing).values():
        for path in _paths_in(value):
            p = Path(path)
            if p.is_dir():
                dirs.append(p.parent if p.name == "simple" else p)
            elif p.is_file():
                _copy_in(root, p)
    env.update(pip_settings(pip_listing, env_only=True))
    if extra:
        env.update(extra)
    return env, dirs


#: where the host's root goes at the pivot (inside the root; empty on the host)
OLD_ROOT = ".slurm_fsm-oldroot"


def chroot_argv(root: Path, env: Mapping[str, str], cwd: Path, argv: Sequence[str]) -> list[str]:
    """Enter the root and run ``argv`` in ``cwd`` with exactly ``env``.

    Not a plain ``chroot``: the kernel refuses a user namespace to a chrooted process
    (unshare(2), EPERM), and enroot makes one for every container. So the command gets
    a mount namespace of its own whose root *is* the release's root (``pivot_root``):
    ``unshare --mount`` -> ``mount --rbind ROOT ROOT`` (with the binds under it) ->
    ``pivot_root ROOT ROOT/.slurm_fsm-oldroot`` -> the host's root is detached (where
    the kernel lets it; gVisor does not, it then stays at ``/.slurm_fsm-oldroot`` in
    that namespace only) -> ``env -i K=V... bash -c 'cd CWD && exec "$@"' - ARGV``.
    """
    q = shlex.quote
    enter = (f"mount --rbind {q(str(root))} {q(str(root))} && cd {q(str(root))} && "
             f"pivot_root . {q(OLD_ROOT)} && cd / && "
             f"{{ umount --lazy /{OLD_ROOT} 2>/dev/null || true; }} && "
             'exec /usr/bin/env -i "$@"')
    inner = f"cd {q(str(cwd))} && exec \"$@\""
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", enter,
            "-", *(f"{k}={v}" for k, v in sorted(env.items())),
            "/bin/bash", "-c", inner, "-", *argv]


def run_inside(root: Path, argv: Sequence[str], *, cwd: Path, timeout: float,
               extra_env: Mapping[str, str] | None = None,
               release: Release = TRIXIE) -> int:
    """Run ``argv`` in the root (mounts in place), output to ours; its exit code."""
    if not is_complete(root):
        raise ChrootError(f"{root} is not made yet: {release.cli('make')}")
    _ensure_hosts(root)
    _ensure_pivot_dir(root)
    env, dirs = inner_env(root, _host_pip_listing(), local_dir=cluster_dir(release=release),
                          extra=extra_env)
    with mounted(root, checkout=checkout_dir(), extra_dirs=dirs, release=release):
        try:
            proc = subprocess.run(  # noqa: S603 - an argument list
                chroot_argv(root, env, cwd, argv), timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            _say(f"{shlex.join(argv)}: timed out after {timeout:g}s", release)
            return 124
    return proc.returncode


# ---------------------------------------------------------------- the suite


def _venv_script(checkout: Path) -> str:
    """Inside: make the venv (once per pyproject.toml) with the dev extras. Inside, the
    checkout's ``.venv`` is the host's ``.venv-trixie`` (:func:`_binds`), so the venv's
    own paths (``#!.../.venv/bin/python``) are those of a venv made by ``make setup``."""
    venv = checkout / ".venv"
    stamp = venv / ".installed"
    q = shlex.quote
    return (
        f"if [ ! -f {q(str(stamp))} ] || [ {q(str(checkout / 'pyproject.toml'))} -nt "
        f"{q(str(stamp))} ]; then "
        f"python3 -m venv {q(str(venv))} && "
        f"{q(str(venv / 'bin/python'))} -m pip install -q -e '.[dev]' && "
        f"touch {q(str(stamp))}; fi"
    )


def run_suite(root: Path, pytest_args: Sequence[str], *, timeout: float,
              release: Release = TRIXIE) -> int:
    """The real-Slurm tests on the release's Slurm: venv, ``pytest -m slurm``, cluster
    down."""
    checkout = checkout_dir()
    venv_py = str(checkout / ".venv" / "bin" / "python")  # the release's venv, inside
    t0 = time.monotonic()
    rc = run_inside(root, ["bash", "-c", _venv_script(checkout)], cwd=checkout,
                    timeout=1800, release=release)
    if rc != 0:
        _say(f"the venv inside failed (exit {rc})", release)
        return rc
    _say(f"venv ready in {time.monotonic() - t0:.1f}s; Slurm inside: "
         f"{_root_slurm_version(root)}; cluster {cluster_dir(release=release)}", release)
    args = list(pytest_args) or ["-m", "slurm", "-q", "-p", "no:cacheprovider", "-rfE"]
    try:
        rc = run_inside(root, [venv_py, "-m", "pytest", *args], cwd=checkout,
                        timeout=timeout, release=release)
    finally:
        if not os.environ.get("SLURM_FSM_KEEP_CLUSTER"):
            run_inside(root, [venv_py, "-m", "slurm_fsm_dev.localcluster", "down"],
                       cwd=checkout, timeout=300, release=release)
    _say(f"real suite on Slurm {release.slurm}: exit {rc} after "
         f"{time.monotonic() - t0:.1f}s", release)
    return rc


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m slurm_fsm_dev.chroot",
        description="A Debian release's own Slurm in a chroot (Debian 13's 24.11, Debian "
                    "unstable's 26.05): make it, run the real suite in it.")
    parser.add_argument("--release", choices=sorted(RELEASES), default=TRIXIE.key,
                        help="which: " + ", ".join(
                            f"{r.key} ({r.debian}, Slurm {r.slurm})"
                            for r in RELEASES.values()) + f"; default {TRIXIE.key}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("make", help="debootstrap + packages (once; a half-made root is redone)")
    sub.add_parser("umount", help="undo every mount under the root (also after a crash)")
    sub.add_parser("status", help="where the root is, whether it is complete and mounted")
    p_run = sub.add_parser("run", help="run a command inside (in this checkout)")
    p_run.add_argument("--timeout", type=float, default=3600.0)
    p_run.add_argument("command", nargs=argparse.REMAINDER)
    p_test = sub.add_parser("test", help="pytest -m slurm inside, on the release's Slurm")
    p_test.add_argument("--timeout", type=float, default=3600.0)
    p_test.add_argument("pytest_args", nargs=argparse.REMAINDER,
                        help="after --: pytest's arguments (default: -m slurm -q -rfE)")
    return parser


def _after_dashes(words: Sequence[str]) -> list[str]:
    return list(words[1:] if words[:1] == ["--"] else words)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    release = RELEASES[args.release]
    root = root_dir(release)
    try:
        if args.cmd == "make":
            make_root(root, release)
        elif args.cmd == "umount":
            left = umount_all(root)
            if left:
                _say(f"still mounted: {', '.join(map(str, left))}", release)
                return 1
            _users_file(root).unlink(missing_ok=True)
            _say(f"nothing mounted under {root}", release)
        elif args.cmd == "status":
            points = mount_points(root)
            print(f"root {root}: {'complete' if is_complete(root) else 'not made'}; "
                  f"Slurm {_root_slurm_version(root)}; "
                  f"cluster {cluster_dir(release=release)}; "
                  f"mounts: {', '.join(map(str, points)) or 'none'}")
        elif args.cmd == "run":
            command = _after_dashes(args.command)
            if not command:
                parser.error("run: a command is needed (run -- CMD ...)")
            return run_inside(root, command, cwd=Path.cwd(), timeout=args.timeout,
                              release=release)
        elif args.cmd == "test":
            return run_suite(root, _after_dashes(args.pytest_args), timeout=args.timeout,
                             release=release)
    except ChrootError as exc:
        print(f"{release.suite}-chroot: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
