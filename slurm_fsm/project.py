"""What slurm_fsm knows about the project whose tests it runs: TensorRT-LLM.

The state machine, the backends and the monitor are generic; the names, files and
commands below are the ones procedure.md gives for TensorRT-LLM's test pipelines,
gathered here so that they are visible in one place (and one place to change for
another project): the allocation's default job name, the installs of step 0E/0F,
the build's GPU-to-arch table, and where the image tags file is and which keys it
holds.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "ARCH_TABLE",
    "DEFAULT_BUILD_ARCH",
    "DEFAULT_JOB_NAME_SUFFIX",
    "EVAL_REQUIREMENTS",
    "IMAGE_KEYS",
    "IMAGE_KEY_SUFFIXES",
    "INSTALL_COMMANDS",
    "TAGS_FILE",
    "install_commands",
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
