"""slurm_fsm: run jobs on Slurm through a persistent allocation, as an explicit FSM.

Everything an orchestrator, a notebook or a test harness needs is importable from
here::

    from slurm_fsm import JobSpec, Executor, SubprocessBackend, Status

Names are loaded on first use (PEP 562), so ``import slurm_fsm`` stays cheap: the
CLI and a script that only needs the spec do not pay for the machine, the backends
or ``transitions``. ``__all__`` is the public surface; a test keeps it equal to the
package namespace.
"""

import importlib as _importlib
import logging as _logging
import typing as _typing

# The library's logger (``slurm_fsm``: the machine, the backend, every run's progress
# under ``slurm_fsm.progress``) is quiet unless the application configures logging;
# the CLI does (``SLURM_FSM_LOG_LEVEL``).
_logging.getLogger("slurm_fsm").addHandler(_logging.NullHandler())

if _typing.TYPE_CHECKING:  # pragma: no cover - what the lazy table below resolves to
    from slurm_fsm.allocation import SHARING_RULES, Allocation, AllocationStatus, RunHandle
    from slurm_fsm.backend import (
        AllocationRequest,
        BatchRequest,
        ContainerOptions,
        GpuProcess,
        Granted,
        JobInfo,
        JobOutcome,
        RunningScript,
        ScriptRequest,
        SlurmBackend,
        StepInfo,
        StepRequest,
        StepResult,
    )
    from slurm_fsm.clock import Clock, SystemClock
    from slurm_fsm.detach import DetachedRun, attach
    from slurm_fsm.duration import Duration
    from slurm_fsm.errors import (
        AllocationFailed,
        BackendError,
        BuildError,
        CommandFailed,
        CommandTimedOut,
        ContainerSupportMissing,
        ControllerUnreachable,
        JobNotFound,
        NotOurJobError,
        SlurmFsmError,
        SpecError,
        StateFileError,
        StateLockTimeout,
        UnknownRun,
    )
    from slurm_fsm.events import Events, PreStep, PreStepResult
    from slurm_fsm.executor import Executor
    from slurm_fsm.jobstate import JobState
    from slurm_fsm.lease import AllocationInUse
    from slurm_fsm.machine import (
        AllocationMachine,
        MachineError,
        PossibleEdge,
        SetupFailed,
        Transition,
    )
    from slurm_fsm.nvsmi import NvidiaSmiFailed
    from slurm_fsm.plan import Plan, PlanCommand, make_plan
    from slurm_fsm.preflight import NoSlurmConfig, PreflightFailed
    from slurm_fsm.progress import StderrEvents
    from slurm_fsm.report import Report, Status
    from slurm_fsm.spec import JobSpec, Mount, PartitionInfo, SlurmEnv, SlurmParams, WorkflowType
    from slurm_fsm.state import AllocState, StateStore
    from slurm_fsm.step0.outcome import Step0Outcome
    from slurm_fsm.step0.table import EDGES, Edge, Observation, State
    from slurm_fsm.subprocess_backend import SubprocessBackend
    from slurm_fsm.testing import FakeClock, FakeCluster, FakeScript

#: public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    # the spec
    "JobSpec": "slurm_fsm.spec",
    "SlurmParams": "slurm_fsm.spec",
    "SlurmEnv": "slurm_fsm.spec",
    "PartitionInfo": "slurm_fsm.spec",
    "Mount": "slurm_fsm.spec",
    "WorkflowType": "slurm_fsm.spec",
    "Duration": "slurm_fsm.duration",
    # running a job
    "Executor": "slurm_fsm.executor",
    "Events": "slurm_fsm.events",
    "PreStep": "slurm_fsm.events",
    "PreStepResult": "slurm_fsm.events",
    "StderrEvents": "slurm_fsm.progress",
    "Clock": "slurm_fsm.clock",
    "SystemClock": "slurm_fsm.clock",
    # the report
    "Report": "slurm_fsm.report",
    "Status": "slurm_fsm.report",
    # the allocation: the object an orchestrator holds, its state file, the machine
    "Allocation": "slurm_fsm.allocation",
    "AllocationStatus": "slurm_fsm.allocation",
    "RunHandle": "slurm_fsm.allocation",
    # runs that outlive the shell
    "DetachedRun": "slurm_fsm.detach",
    "UnknownRun": "slurm_fsm.errors",
    "attach": "slurm_fsm.detach",
    "SHARING_RULES": "slurm_fsm.allocation",
    "AllocState": "slurm_fsm.state",
    "StateStore": "slurm_fsm.state",
    "AllocationMachine": "slurm_fsm.machine",
    "Step0Outcome": "slurm_fsm.step0.outcome",
    "State": "slurm_fsm.step0.table",
    "Edge": "slurm_fsm.step0.table",
    "EDGES": "slurm_fsm.step0.table",
    "Observation": "slurm_fsm.step0.table",
    "Transition": "slurm_fsm.machine",
    "PossibleEdge": "slurm_fsm.machine",
    "Plan": "slurm_fsm.plan",
    "make_plan": "slurm_fsm.plan",
    "PlanCommand": "slurm_fsm.plan",
    # backends
    "SlurmBackend": "slurm_fsm.backend",
    "SubprocessBackend": "slurm_fsm.subprocess_backend",
    "AllocationRequest": "slurm_fsm.backend",
    "BatchRequest": "slurm_fsm.backend",
    "ContainerOptions": "slurm_fsm.backend",
    "GpuProcess": "slurm_fsm.backend",
    "Granted": "slurm_fsm.backend",
    "JobInfo": "slurm_fsm.backend",
    "JobState": "slurm_fsm.jobstate",
    "JobOutcome": "slurm_fsm.backend",
    "RunningScript": "slurm_fsm.backend",
    "ScriptRequest": "slurm_fsm.backend",
    "StepInfo": "slurm_fsm.backend",
    "StepRequest": "slurm_fsm.backend",
    "StepResult": "slurm_fsm.backend",
    # testing with the fake cluster
    "FakeCluster": "slurm_fsm.testing",
    "FakeClock": "slurm_fsm.testing",
    "FakeScript": "slurm_fsm.testing",
    # errors
    "SlurmFsmError": "slurm_fsm.errors",
    "AllocationInUse": "slurm_fsm.lease",
    "NoSlurmConfig": "slurm_fsm.preflight",
    "PreflightFailed": "slurm_fsm.preflight",
    "NvidiaSmiFailed": "slurm_fsm.nvsmi",
    "SpecError": "slurm_fsm.errors",
    "StateFileError": "slurm_fsm.errors",
    "BackendError": "slurm_fsm.errors",
    "CommandFailed": "slurm_fsm.errors",
    "CommandTimedOut": "slurm_fsm.errors",
    "ControllerUnreachable": "slurm_fsm.errors",
    "JobNotFound": "slurm_fsm.errors",
    "NotOurJobError": "slurm_fsm.errors",
    "AllocationFailed": "slurm_fsm.errors",
    "ContainerSupportMissing": "slurm_fsm.errors",
    "StateLockTimeout": "slurm_fsm.errors",
    "MachineError": "slurm_fsm.machine",
    "SetupFailed": "slurm_fsm.errors",
    "BuildError": "slurm_fsm.errors",
}

if _typing.TYPE_CHECKING:
    __version__: str


def _package_version() -> str:
    # importlib.metadata costs ~50 ms to import: only when someone asks
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("slurm_fsm")
    except PackageNotFoundError:  # pragma: no cover - a source tree never installed
        return "0+unknown"

__all__ = [
    "EDGES",
    "SHARING_RULES",
    "AllocState",
    "Allocation",
    "AllocationFailed",
    "AllocationInUse",
    "AllocationMachine",
    "AllocationRequest",
    "AllocationStatus",
    "BackendError",
    "BatchRequest",
    "BuildError",
    "Clock",
    "CommandFailed",
    "CommandTimedOut",
    "ContainerOptions",
    "ContainerSupportMissing",
    "ControllerUnreachable",
    "DetachedRun",
    "Duration",
    "Edge",
    "Events",
    "Executor",
    "FakeClock",
    "FakeCluster",
    "FakeScript",
    "GpuProcess",
    "Granted",
    "JobInfo",
    "JobNotFound",
    "JobOutcome",
    "JobSpec",
    "JobState",
    "MachineError",
    "Mount",
    "NoSlurmConfig",
    "NotOurJobError",
    "NvidiaSmiFailed",
    "Observation",
    "PartitionInfo",
    "Plan",
    "PlanCommand",
    "PossibleEdge",
    "PreStep",
    "PreStepResult",
    "PreflightFailed",
    "Report",
    "RunHandle",
    "RunningScript",
    "ScriptRequest",
    "SetupFailed",
    "SlurmBackend",
    "SlurmEnv",
    "SlurmFsmError",
    "SlurmParams",
    "SpecError",
    "State",
    "StateFileError",
    "StateLockTimeout",
    "StateStore",
    "Status",
    "StderrEvents",
    "Step0Outcome",
    "StepInfo",
    "StepRequest",
    "StepResult",
    "SubprocessBackend",
    "SystemClock",
    "Transition",
    "UnknownRun",
    "WorkflowType",
    "__version__",
    "attach",
    "make_plan",
]


def __getattr__(name: str) -> _typing.Any:
    """Load a public name from its module on first use and keep it here."""
    if name == "__version__":
        value: _typing.Any = _package_version()
        globals()[name] = value
        return value
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'slurm_fsm' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
