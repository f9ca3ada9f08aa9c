"""Development tooling of the slurm_fsm repository, not part of the package (the wheel
ships ``slurm_fsm`` only): the local Slurm cluster with pyxis + enroot for the tests,
the demo and CI (``python -m slurm_fsm_dev.localcluster``), and the docs generator."""
