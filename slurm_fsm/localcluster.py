"""A local Slurm cluster for tests, the demo and CI (work in progress)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

PACKAGES = ("slurm-wlm", "slurm-client", "slurmdbd", "mariadb-server", "munge")
REQUIRED_COMMANDS = {
    "slurmctld": "slurm-wlm",
    "slurmd": "slurm-wlm",
    "slurmdbd": "slurmdbd",
    "sinfo": "slurm-client",
    "sacctmgr": "slurm-client",
    "munged": "munge",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
}


class LocalClusterError(RuntimeError):
    """The local cluster could not be installed, started or stopped."""


def missing_commands() -> list[str]:
    return [c for c in REQUIRED_COMMANDS if shutil.which(c) is None]


def ensure_packages() -> None:
    missing = missing_commands()
    if not missing:
        return
    if os.geteuid() != 0:
        raise LocalClusterError(
            f"missing commands {', '.join(missing)}; as root run: apt-get update && "
            f"apt-get install -y {' '.join(PACKAGES)}"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    t0 = time.monotonic()
    subprocess.run(["apt-get", "update"], env=env, timeout=600, check=True)  # noqa: S603
    subprocess.run(  # noqa: S603
        ["apt-get", "install", "-y", *PACKAGES], env=env, timeout=1800, check=True
    )
    print(f"packages installed in {time.monotonic() - t0:.1f}s")
