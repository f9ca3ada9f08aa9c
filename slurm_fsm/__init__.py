"""slurm_fsm: run jobs on Slurm through a persistent allocation, as an explicit FSM."""

from slurm_fsm.duration import Duration
from slurm_fsm.errors import (
    AllocationFailed,
    BackendError,
    CommandFailed,
    CommandTimedOut,
    ContainerSupportMissing,
    ControllerUnreachable,
    JobNotFound,
    NotOurJobError,
    SlurmFsmError,
    SpecError,
    StateFileError,
)

__version__ = "0.1.0"

__all__ = [
    "AllocationFailed",
    "BackendError",
    "CommandFailed",
    "CommandTimedOut",
    "ContainerSupportMissing",
    "ControllerUnreachable",
    "Duration",
    "JobNotFound",
    "NotOurJobError",
    "SlurmFsmError",
    "SpecError",
    "StateFileError",
    "__version__",
]
