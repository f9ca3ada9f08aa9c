"""Real pyxis + enroot for the local Slurm cluster (:mod:`slurm_fsm_dev.localcluster`).

``prepare(base, plugstack)`` builds NVIDIA enroot and pyxis from the vendored
sources (``$SLURM_FSM_PYXIS_SRC``, default ``<repo>/../shared/vendor/pyxis-enroot``,
which may be read-only), makes the test images, and writes the cluster's
``plugstack.conf``. Everything built goes to a machine-wide cache
(``$SLURM_FSM_PYXIS_CACHE``, default ``/var/cache/slurm_fsm``) under a folder named
by the sources' hash, so only the first ``up`` of a machine pays for it (about 80 s on
2 CPUs: :func:`build_estimate_s`); later ones take well under a second. With
``SLURM_FSM_LOCAL_CONTAINERS=if-built`` (``make demo``) nothing is built: a cached build
is used, else the cluster comes up without containers until an ``up`` without it.

- The build is the vendored recipe ``setup-pyxis.sh`` (Debian build deps, enroot with
  static musl helpers, pyxis, two busybox+bash images); enroot's commands are linked
  into ``/usr/local/bin``, where slurmd and pyxis' job-end cleanup find them.
- A third image holds the host's Python (the interpreter ``/usr/bin/python3`` is,
  asked for its version and standard library: :func:`host_python`; python3.11 on
  Debian 12, python3.13 on Debian 13; its shared libraries too) and pip, with
  ``/etc/pip.conf`` saying ``no-index``:
  step 0E's ``pip install -e .`` runs for real, with no registry and no network.
- enroot's state is kept per cluster and per node: all local nodes share one
  filesystem, so the paths are keyed by the cluster's folder (from ``SLURM_CONF``,
  which every job step carries) and by ``$(hostname)`` (each slurmd has its own
  UTS namespace). A cluster's containers live in ``<base>/enroot`` and go with it.

Without the sources (or not as root) nothing is built and the cluster comes up
without containers; :class:`ContainerInfo` is then None and the reason is kept.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
from filelock import FileLock

from slurm_fsm_dev import pyxissources

__all__ = [
    "ENV_CACHE",
    "ENV_SOURCES",
    "IMAGE_NAMES",
    "ContainerBuildError",
    "ContainerInfo",
    "HostPython",
    "cache_root",
    "enroot_conf",
    "ensure_sources",
    "fetched_dir",
    "host_python",
    "make_install_repo",
    "plugstack_line",
    "prepare",
    "sources_dir",
    "sources_problem",
    "unavailable",
    "vendored_dir",
]

ENV_SOURCES = "SLURM_FSM_PYXIS_SRC"
ENV_CACHE = "SLURM_FSM_PYXIS_CACHE"
#: ``if-built``: use pyxis + enroot when a build is cached, never build them now (the
#: demo's job needs no container; ``make demo`` sets it). Unset: build when missing.
ENV_CONTAINERS = "SLURM_FSM_LOCAL_CONTAINERS"
#: How a cluster started without building says so (``localcluster`` restarts such a
#: cluster with containers when a later ``up`` may build them).
NOT_BUILT = "not built yet"
#: The first build, measured: 83 s on 2 CPUs (a Debian 12 VM, build deps installed);
#: it is mostly compiling, so it scales with the CPUs.
_BUILD_CPU_SECONDS = 166.0
DEFAULT_CACHE = Path("/var/cache/slurm_fsm")
SOURCE_FILES = ("pyxis-src.tar.gz", "enroot-src.tar.gz", "setup-pyxis.sh")
LINK_DIR = Path("/usr/local/bin")
#: image name -> (file in the build folder, what /etc/image-id says inside)
IMAGE_NAMES: Mapping[str, tuple[str, str]] = {
    "busybox": ("img.sqsh", "hello from image"),
    "busybox2": ("img2.sqsh", "hello from image2"),
    "python": ("img-python.sqsh", "python image"),
}
#: bumped when the python image's recipe changes (part of its stamp)
_PYTHON_IMAGE_VERSION = "2"
_BUILD_TIMEOUT_S = 1800.0
#: The system's Python (Debian's ``python3``); the image gets the interpreter it names
SYSTEM_PYTHON = Path("/usr/bin/python3")
_WHEELS = Path("/usr/share/python-wheels")
_STDLIB_SKIP = ("test", "tests", "idlelib", "tkinter", "turtledemo", "EXTERNALLY-MANAGED")


class ContainerBuildError(RuntimeError):
    """Building enroot, pyxis or an image failed."""


@attrs.frozen
class ContainerInfo:
    """Where a test finds the local cluster's pyxis, enroot and images."""

    plugin: Path  # spank_pyxis.so
    enroot: Path  # the enroot command (linked into /usr/local/bin)
    images: dict[str, Path]  # "busybox", "busybox2", "python" -> squashfs file
    image_ids: dict[str, str]  # the same names -> the text of /etc/image-id inside
    state_dir: Path  # <base>/enroot: this cluster's containers, per user and node
    build_dir: Path
    sources: Path
    build_seconds: float  # what preparing took at this `up` (0.x s when cached)

    def to_json(self) -> dict[str, Any]:
        return {
            "plugin": str(self.plugin),
            "enroot": str(self.enroot),
            "images": {k: str(v) for k, v in self.images.items()},
            "image_ids": dict(self.image_ids),
            "state_dir": str(self.state_dir),
            "build_dir": str(self.build_dir),
            "sources": str(self.sources),
            "build_seconds": self.build_seconds,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContainerInfo:
        return cls(
            plugin=Path(data["plugin"]),
            enroot=Path(data["enroot"]),
            images={str(k): Path(v) for k, v in data["images"].items()},
            image_ids={str(k): str(v) for k, v in data["image_ids"].items()},
            state_dir=Path(data["state_dir"]),
            build_dir=Path(data["build_dir"]),
            sources=Path(data["sources"]),
            build_seconds=float(data.get("build_seconds", 0.0)),
        )

    def container_dirs(self) -> list[Path]:
        """Every container enroot holds for this cluster (any user, any node)."""
        return sorted(self.state_dir.glob("*/*/data/*"))


def vendored_dir() -> Path:
    """``$SLURM_FSM_PYXIS_SRC``, else ``../shared/vendor/pyxis-enroot`` beside the repo."""
    raw = os.environ.get(ENV_SOURCES, "").strip()
    if raw:
        return Path(raw).absolute()
    repo = Path(__file__).resolve().parent.parent
    return repo.parent / "shared" / "vendor" / "pyxis-enroot"


def fetched_dir() -> Path:
    """Where :func:`ensure_sources` puts the pinned upstream sources it fetched."""
    return cache_root() / f"pyxis-sources-{pyxissources.pins_key()}"


def _missing(src: Path) -> list[str]:
    return [f for f in SOURCE_FILES if not (src / f).is_file()]


def sources_dir() -> Path:
    """The vendored sources (:func:`vendored_dir`), else those fetched before
    (:func:`fetched_dir`); the vendored folder when neither is there."""
    vendored = vendored_dir()
    if not _missing(vendored):
        return vendored
    fetched = fetched_dir()
    return fetched if not _missing(fetched) else vendored


def sources_problem(src: Path | None = None) -> str:
    """Why containers cannot be built from ``src`` ("" when the sources are all there)."""
    src = src or sources_dir()
    missing = _missing(src)
    if missing:
        return (f"no pyxis/enroot sources at {src} (missing {', '.join(missing)}; "
                f"set {ENV_SOURCES})")
    return ""


def ensure_sources(say: Callable[[str], None] = print) -> tuple[Path | None, str]:
    """The sources (:func:`sources_dir`), fetching the pinned upstream releases
    (:mod:`slurm_fsm_dev.pyxissources`) when neither the vendored nor a fetched copy is
    here; or None and why there are none."""
    src = sources_dir()
    problem = sources_problem(src)
    if not problem:
        return src, ""
    try:
        return pyxissources.fetch(fetched_dir(), say=say), ""
    except (pyxissources.SourceFetchError, OSError) as exc:
        return None, (f"{problem}, and the pinned upstream releases could not be fetched "
                      f"({exc}; ${pyxissources.ENV_GIT} names a git mirror)")


def cache_root() -> Path:
    raw = os.environ.get(ENV_CACHE, "").strip()
    return Path(raw).absolute() if raw else DEFAULT_CACHE


def _sources_key(src: Path) -> str:
    digest = hashlib.sha256()
    for name in SOURCE_FILES:
        digest.update((src / name).read_bytes())
    return digest.hexdigest()[:12]


def enroot_conf(fallback_base: Path) -> str:
    """enroot's drop-in config: state per cluster (from ``SLURM_CONF``), user and node.

    enroot ``eval``s each value; ``SLURM_CONF`` is ``<base>/etc/slurm.conf``.
    """
    conf = f'${{SLURM_CONF:-{fallback_base}/etc/slurm.conf}}'
    base = f'$(dirname "$(dirname "{conf}")")/enroot'
    node = f"{base}/$(id -u)/$(hostname)"
    return (
        "# written by slurm_fsm_dev.localpyxis: containers per cluster, user and node\n"
        f"ENROOT_RUNTIME_PATH {node}/run\n"
        f"ENROOT_CACHE_PATH {node}/cache\n"
        f"ENROOT_DATA_PATH {node}/data\n"
        f"ENROOT_CONFIG_PATH {node}/config\n"
        f"ENROOT_TEMP_PATH {base}/tmp\n"
    )


def plugstack_line(plugin: Path, runtime_dir: Path, scope: str = "global") -> str:
    """The cluster's plugstack.conf: pyxis required, containers ``global`` (its default:
    a named container outlives its job on the node) or ``job`` (it goes with its job:
    the ``jobscope`` configuration)."""
    if scope not in ("global", "job"):
        raise ValueError(f"container_scope is global or job, got {scope!r}")
    return f"required {plugin} runtime_path={runtime_dir} container_scope={scope}\n"


def _run(argv: list[str], *, timeout: float, env: Mapping[str, str] | None = None,
         cwd: Path | None = None) -> str:
    try:
        proc = subprocess.run(  # noqa: S603 - an argument list
            argv, capture_output=True, text=True, timeout=timeout, check=False,
            env=dict(env) if env is not None else None, cwd=cwd, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise ContainerBuildError(f"{' '.join(argv)}: timed out after {timeout:g}s") from exc
    except OSError as exc:
        raise ContainerBuildError(f"{' '.join(argv)}: {exc}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise ContainerBuildError(f"{' '.join(argv)}: exit {proc.returncode}:\n{tail}")
    return proc.stdout


def _ldd_paths(files: list[Path]) -> set[Path]:
    """The shared libraries (and loader) the ELF files need, as absolute paths."""
    found: set[Path] = set()
    for f in files:
        try:
            out = _run(["ldd", str(f)], timeout=30)
        except ContainerBuildError:
            continue  # not dynamic
        for line in out.splitlines():
            for word in line.split():
                if word.startswith("/"):
                    found.add(Path(word))
    return found


def _copy_into(root: Path, path: Path) -> None:
    dest = root / path.relative_to("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists():
        shutil.copy2(path.resolve(), dest)


@attrs.frozen
class HostPython:
    """The system's Python, as the interpreter itself says (never a guessed version)."""

    executable: Path  # /usr/bin/python3.13: the real file, not the python3 link
    version: str  # "3.13"
    stdlib: Path  # /usr/lib/python3.13

    @property
    def name(self) -> str:
        return f"python{self.version}"


def host_python(python: Path = SYSTEM_PYTHON) -> HostPython:
    """Ask ``python`` (default ``/usr/bin/python3``) for its version and standard library."""
    if not python.exists():
        raise ContainerBuildError(f"{python} is missing (apt-get install python3)")
    code = ("import sys, sysconfig; "
            "print(sys.version_info[0], sys.version_info[1], sysconfig.get_path('stdlib'))")
    out = _run([str(python), "-I", "-c", code], timeout=30).split()
    if len(out) != 3 or not (out[0].isdigit() and out[1].isdigit()):
        raise ContainerBuildError(f"{python} printed {' '.join(out)!r} for its version")
    version = f"{out[0]}.{out[1]}"
    executable = python.resolve()
    stdlib = Path(out[2])
    if not stdlib.is_dir():
        raise ContainerBuildError(f"{python}'s standard library {stdlib} is missing")
    return HostPython(executable=executable, version=version, stdlib=stdlib)


def _python_image(build: Path, image: Path, image_id: str) -> None:
    """A busybox rootfs with the host's Python + pip (offline: ``no-index``)."""
    py = host_python()
    pip_wheels = sorted(_WHEELS.glob("pip-*.whl"))
    if not pip_wheels:
        raise ContainerBuildError(f"no pip wheel in {_WHEELS} (apt-get install python3-pip-whl)")
    root = build / "python-rootfs"
    shutil.rmtree(root, ignore_errors=True)
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "etc", "proc", "sys",
              "dev", "tmp", "run", "opt", "root", "home", "var/tmp", "data",
              "usr/lib/python3/dist-packages", "etc/ssl/certs"):
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2("/bin/busybox", root / "bin/busybox")
    for applet in _run(["/bin/busybox", "--list-full"], timeout=30).split():
        link = root / applet
        if not link.exists() and not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/bin/busybox")
    shutil.copy2(py.executable, root / "usr/bin" / py.name)
    for alias in ("python3", "python"):
        (root / "usr/bin" / alias).unlink(missing_ok=True)
        (root / "usr/bin" / alias).symlink_to(py.name)
    stdlib = py.stdlib
    inside = root / stdlib.relative_to("/")
    shutil.copytree(stdlib, inside, symlinks=True,
                    ignore=shutil.ignore_patterns(*_STDLIB_SKIP))
    host_elves = [py.executable,
                  *(stdlib / so.relative_to(inside)
                    for so in (inside / "lib-dynload").glob("*.so"))]
    for lib in _ldd_paths(host_elves):
        _copy_into(root, lib)
    with zipfile.ZipFile(pip_wheels[-1]) as whl:
        whl.extractall(root / "usr/lib/python3/dist-packages")
    launcher = "#!/usr/bin/python3\nimport sys\nfrom pip._internal.cli.main import main\n" \
               "sys.exit(main())\n"
    for name in ("pip", "pip3"):
        p = root / "usr/bin" / name
        p.write_text(launcher)
        p.chmod(0o755)
    (root / "etc/pip.conf").write_text(
        "[global]\nno-index = true\ndisable-pip-version-check = true\n"
        "root-user-action = ignore\n"
    )
    ca = Path("/etc/ssl/certs/ca-certificates.crt")
    if ca.exists():  # pip checks the bundle a job's PIP_CERT names, even offline
        shutil.copy2(ca, root / "etc/ssl/certs/ca-certificates.crt")
    (root / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\n")
    (root / "etc/image-id").write_text(image_id + "\n")
    # enroot takes the container's PATH from here (pip puts scripts in /usr/local/bin)
    (root / "etc/environment").write_text(
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n")
    for d in ("tmp", "var/tmp"):
        (root / d).chmod(0o1777)
    tmp = image.with_suffix(".tmp")
    _run(["mksquashfs", str(root), str(tmp), "-noappend", "-comp", "gzip", "-all-root",
          "-no-progress", "-quiet"], timeout=600)
    tmp.replace(image)
    shutil.rmtree(root, ignore_errors=True)


def build_estimate_s() -> float:
    """How long the first build of enroot + pyxis takes here, from the measured CPU
    time and this machine's CPUs (at least 40 s)."""
    return max(40.0, _BUILD_CPU_SECONDS / max(1, os.cpu_count() or 1))


def _complete(build: Path) -> bool:
    """A cached build with the plugin, enroot and every image."""
    files = [build / "pyxis" / "lib" / "slurm" / "spank_pyxis.so",
             build / "enroot" / "bin" / "enroot",
             *(build / f for f, _ in IMAGE_NAMES.values())]
    return all(p.exists() for p in files)


def _build(src: Path, build: Path, say: Callable[[str], None]) -> None:
    """The recipe (idempotent, re-links /usr/local/bin) and the python image."""
    env = dict(os.environ, ROOT=str(build), LINK_DIR=str(LINK_DIR),
               PLUGSTACK=str(build / "plugstack.conf"), DEBIAN_FRONTEND="noninteractive")
    fresh = not (build / "enroot" / "bin" / "enroot").exists()
    if fresh:
        say(f"building enroot + pyxis from {src} into {build} (about "
            f"{build_estimate_s():.0f} s on {os.cpu_count() or 1} CPUs, once per machine)")
    t0 = time.monotonic()
    _run(["bash", str(src / "setup-pyxis.sh"), str(src / "pyxis-src.tar.gz"),
          str(src / "enroot-src.tar.gz")], timeout=_BUILD_TIMEOUT_S, env=env, cwd=build)
    if fresh:
        say(f"enroot + pyxis built in {time.monotonic() - t0:.1f}s")
    image_file, image_id = IMAGE_NAMES["python"]
    stamp = build / f"{image_file}.stamp"
    py = host_python()
    # the same stamp as when the interpreter was written in here: Debian 12's cached
    # image (python3.11) stays valid; another interpreter has another mtime
    wanted = f"{_PYTHON_IMAGE_VERSION} {py.executable.stat().st_mtime}"
    if not (build / image_file).exists() or not stamp.exists() or stamp.read_text() != wanted:
        t1 = time.monotonic()
        _python_image(build, build / image_file, image_id)
        stamp.write_text(wanted)
        size = (build / image_file).stat().st_size / 1e6
        say(f"python image built in {time.monotonic() - t1:.1f}s ({size:.1f} MB)")


def prepare(base: Path, plugstack: Path, *, say: Callable[[str], None] = print,
            scope: str = "global") -> tuple[ContainerInfo | None, str]:
    """Build (or reuse) pyxis, enroot and the images; write ``plugstack``.

    Returns the info, or None and why containers are not available. ``plugstack``
    is left empty in that case, so the cluster still comes up.
    """
    plugstack.write_text("")
    src = sources_dir()
    problem = sources_problem(src)
    if problem and os.geteuid() == 0 and \
            os.environ.get(ENV_CONTAINERS, "").strip() != "if-built":
        fetched, problem = ensure_sources(say)
        src = fetched or src
    if problem:
        return None, problem
    if os.geteuid() != 0:
        return None, "containers need root (apt-get, enroot in /usr/local/bin)"
    t0 = time.monotonic()
    build = cache_root() / f"pyxis-{_sources_key(src)}"
    if os.environ.get(ENV_CONTAINERS, "").strip() == "if-built" and not _complete(build):
        return None, (f"{NOT_BUILT} ({ENV_CONTAINERS}=if-built: nothing here needs a "
                      f"container); `make cluster` builds them once, about "
                      f"{build_estimate_s():.0f} s on {os.cpu_count() or 1} CPUs")
    build.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(build) + ".lock", timeout=_BUILD_TIMEOUT_S):
            _build(src, build, say)
            conf_d = build / "enroot" / "etc" / "enroot" / "enroot.conf.d"
            # the recipe's own drop-in keys state by node only; enroot keeps the first
            # value it reads, so ours replaces it rather than following it
            # atomically: another cluster's import may be reading it at this moment
            conf = conf_d / "50-local-slurm.conf"
            tmp = conf.with_name(f".{conf.name}.{os.getpid()}.tmp")
            tmp.write_text(enroot_conf(base))
            os.replace(tmp, conf)
    except (ContainerBuildError, OSError, TimeoutError) as exc:
        return None, f"pyxis/enroot build failed: {exc}"
    plugin = build / "pyxis" / "lib" / "slurm" / "spank_pyxis.so"
    images = {name: build / f for name, (f, _) in IMAGE_NAMES.items()}
    absent = [str(p) for p in (plugin, *images.values()) if not p.exists()]
    if absent:
        return None, f"pyxis/enroot build incomplete: missing {', '.join(absent)}"
    state = base / "enroot"
    (state / "tmp").mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o1777)
    os.chmod(state / "tmp", 0o1777)
    runtime = base / "pyxis-run"
    runtime.mkdir(parents=True, exist_ok=True)
    plugstack.write_text(plugstack_line(plugin, runtime, scope))
    info = ContainerInfo(
        plugin=plugin, enroot=LINK_DIR / "enroot", images=images,
        image_ids={name: text for name, (_, text) in IMAGE_NAMES.items()},
        state_dir=state, build_dir=build, sources=src,
        build_seconds=round(time.monotonic() - t0, 2),
    )
    return info, ""


# ------------------------------------------------ a repo that installs offline

_BACKEND = '''\
"""A PEP 517 backend in the tree: builds {name} without setuptools or a network."""
import base64, hashlib, os, zipfile

NAME, VERSION = "{name}", "0.1"


def _wheel(directory, files):
    dist = f"{{NAME}}-{{VERSION}}"
    files = dict(files)
    files[f"{{dist}}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\\nName: {{NAME}}\\nVersion: {{VERSION}}\\n")
    files[f"{{dist}}.dist-info/WHEEL"] = (
        "Wheel-Version: 1.0\\nGenerator: it\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
    record = []
    filename = f"{{dist}}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w") as z:
        for path, text in files.items():
            data = text.encode()
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{{path}},sha256={{digest.decode()}},{{len(data)}}")
        record.append(f"{{dist}}.dist-info/RECORD,,")
        z.writestr(f"{{dist}}.dist-info/RECORD", "\\n".join(record) + "\\n")
    return filename


def build_wheel(directory, config_settings=None, metadata_directory=None):
    with open(os.path.join(NAME, "__init__.py")) as fh:
        return _wheel(directory, {{f"{{NAME}}/__init__.py": fh.read()}})


def build_editable(directory, config_settings=None, metadata_directory=None):
    return _wheel(directory, {{f"{{NAME}}.pth": os.path.abspath(".") + "\\n"}})
'''


def _package(root: Path, name: str, marker: str) -> None:
    (root / "_backend").mkdir(parents=True, exist_ok=True)
    (root / "_backend" / "it_backend.py").write_text(_BACKEND.format(name=name))
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "it_backend"\n'
        'backend-path = ["_backend"]\n'
        f'\n[project]\nname = "{name}"\nversion = "0.1"\n')
    (root / name).mkdir(exist_ok=True)
    (root / name / "__init__.py").write_text(f"MARKER = {marker!r}\n")


def make_install_repo(repo: Path, marker: str = "installed-from-repo") -> Path:
    """A repo whose ``pip install -e .`` installs ``it_demo`` (editable) and whose
    ``requirements-dev.txt`` installs ``it_devtool`` from ``./devtool``: no index needed."""
    _package(repo, "it_demo", marker)
    _package(repo / "devtool", "it_devtool", "devtool")
    (repo / "requirements-dev.txt").write_text("./devtool\n")
    return repo


# ------------------------------------------------ said once at the start of a run

#: What a run without containers says, once (``make test``'s first line, and the line
#: of each pytest session that deselects the container tests).
NO_CONTAINERS = "no containers on this machine"


def unavailable(say: Callable[[str], None] = print) -> str:
    """Why the local clusters here will have no pyxis + enroot ("" when they will):
    neither the vendored sources nor a fetch of the pinned releases (fetched now when
    missing and possible)."""
    return ensure_sources(say)[1]


def main(argv: list[str] | None = None) -> int:
    """``python -m slurm_fsm_dev.localpyxis sources``: get the sources (vendored, or the
    pinned releases fetched) and say in one line whether containers can be built here.
    Exit 0 either way: a machine without them runs everything but the container tests."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m slurm_fsm_dev.localpyxis",
        description="Where the local cluster's pyxis + enroot sources come from.")
    parser.add_argument("command", choices=["sources"])
    parser.parse_args(argv)
    problem = unavailable(say=print)
    if problem:
        print(f"{NO_CONTAINERS.upper()}: {problem}. The tests that need pyxis + enroot "
              f"are deselected (each pytest session says so in one line); everything "
              f"else runs.")
    else:
        print(f"containers: pyxis + enroot sources at {sources_dir()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
