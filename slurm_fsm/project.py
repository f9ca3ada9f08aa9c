"""What slurm_fsm knows about the project whose tests it runs: TensorRT-LLM.

The state machine, the backends and the monitor are generic; the names, files and
commands below are the ones procedure.md gives for TensorRT-LLM's test pipelines,
gathered here so that they are visible in one place (and one place to change for
another project): the allocation's default job name, the installs of step 0E/0F,
the build's GPU-to-arch table, and where the image tags file is and which keys it
holds.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "ARCH_TABLE",
    "DEFAULT_BUILD_ARCH",
    "DEFAULT_JOB_NAME_SUFFIX",
    "EVAL_REQUIREMENTS",
    "IMAGE_KEYS",
    "IMAGE_KEY_SUFFIXES",
    "INSTALL_COMMANDS",
    "PACKAGE_FILES",
    "TAGS_FILE",
    "install_commands",
    "install_inputs",
]

#: The persistent allocation's job name is ``<account><this>`` unless the spec's
#: ``alloc_job_name`` says otherwise.
DEFAULT_JOB_NAME_SUFFIX = "-trtllm.persistent"

#: pip installs of step 0E/0F, run in ``repo_root`` inside the writable container:
#: (what the log says, argv).
INSTALL_COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pip install -e .", ("pip", "install", "-e", ".")),
    ("pip install -r requirements-dev.txt", ("pip", "install", "-r", "requirements-dev.txt")),
)
#: Installed too when the repository has it (relative to ``repo_root``).
EVAL_REQUIREMENTS = "examples/trtllm-eval/requirements.txt"


def install_commands(repo_root: Path) -> list[tuple[str, tuple[str, ...]]]:
    """The installs of step 0E/0F for the repository at ``repo_root``."""
    commands = list(INSTALL_COMMANDS)
    if (repo_root / EVAL_REQUIREMENTS).exists():
        commands.append((f"pip install -r {EVAL_REQUIREMENTS}",
                         ("pip", "install", "-r", EVAL_REQUIREMENTS)))
    return commands


#: What ``pip install`` of a source directory reads (TensorRT-LLM's ``setup.py`` reads
#: ``requirements.txt``): install inputs of the repo and of any local directory a
#: requirements file names.
PACKAGE_FILES = ("setup.py", "pyproject.toml", "setup.cfg", "requirements.txt")
#: At most this many files are followed through ``-r``/``-c`` and local directories.
MAX_INPUTS = 200


def _local(target: str) -> bool:
    return target == "." or target.startswith(("./", "../", "/"))


def _requirement_refs(path: Path) -> list[Path]:
    """What a requirements file makes pip read, relative to its folder: the files it
    names (``-r``, ``-c``), the package files of a local editable (``-e ./x``: the code
    stays where it is), and a local directory it installs (``./x``: copied, so whole)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found = []
    for raw in text.splitlines():
        words = raw.split(" #", 1)[0].replace("=", " ", 1).split() if raw.startswith(
            "--") else raw.split(" #", 1)[0].split()
        if len(words) >= 2 and words[0] in ("-r", "-c", "--requirement", "--constraint"):
            found.append(path.parent / words[1])
        elif len(words) >= 2 and words[0] in ("-e", "--editable") and _local(words[1]):
            found += [path.parent / words[1] / name for name in PACKAGE_FILES]
        elif len(words) == 1 and _local(words[0]):
            found.append(path.parent / words[0])
    return found


def install_inputs(repo_root: Path) -> list[Path]:
    """The files the installs of :func:`install_commands` read: the repo's
    :data:`PACKAGE_FILES`, each requirements file and what it names (``-r``, ``-c``),
    and local directories it installs (whole: hashed as a tree). Paths that do not
    exist are listed too (a file that appears is a change)."""
    todo = [repo_root / name for name in PACKAGE_FILES]
    for _, argv in install_commands(repo_root):
        todo += [repo_root / argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "-r"]
    seen: list[Path] = []
    while todo and len(seen) < MAX_INPUTS:
        path = Path(os.path.normpath(todo.pop(0)))
        if path in seen:
            continue
        seen.append(path)
        if path.is_file() and path.name not in PACKAGE_FILES[:3]:
            todo += _requirement_refs(path)
    return seen


#: GPU model (a token of the nvidia-smi name) -> build arch, the ``-a`` flag.
#: Every Hopper part is sm_90 (compute capability 9.0): the export parts (H800, H20)
#: and the variants (``H100 NVL``, ``H100 PCIe``: the token H100 decides) too. Jetson
#: Thor is compute capability 11.0 per CUDA 13.0 (``sm_110``; CUDA 12.8/12.9 called it
#: ``sm_101``): its build targets CUDA 13.
ARCH_TABLE: dict[str, str] = {
    "H100": "90-real",
    "H200": "90-real",
    "H800": "90-real",
    "H20": "90-real",
    "GH200": "90-real",  # Grace Hopper (sm_90)
    "THOR": "110-real",  # Jetson/DRIVE Thor (Arm; sm_110 since CUDA 13.0)
    "B200": "100-real",
    "GB200": "100-real",
    "B300": "100-real",
    "GB300": "100-real",
    "A100": "80-real",
    "L40S": "89-real",
}
#: Build arch of a GPU that is not in :data:`ARCH_TABLE`.
DEFAULT_BUILD_ARCH = "100-real"

#: The image tags file, relative to the repo root.
TAGS_FILE = Path("jenkins") / "current_image_tags.properties"
#: The key of the image for each CPU arch in :data:`TAGS_FILE` (TensorRT-LLM's names).
IMAGE_KEYS: dict[str, str] = {"x86_64": "LLM_DOCKER_IMAGE", "aarch64": "LLM_SBSA_DOCKER_IMAGE"}
#: When the key above is absent: the one key ending with this (any case).
IMAGE_KEY_SUFFIXES: dict[str, str] = {"x86_64": "_X86_64", "aarch64": "_AARCH64"}
