"""How srun relays slurmstepd's lines, in each form real Slurm prints (issue 44 item 9).

Slurm 22.05 and 24.11 prefix them ``slurmstepd-n1: error: ``; 26.05 prefixes them with
the time slurmstepd logged them, ``[2026-12-06T18:00:24.403] error: `` (recorded from the
real 26.05.5 cluster: tests/data/real/local/slurm-26.05/); slurmd's own log adds the step
(``[2025-11-06T20:36:19.163] [19.0] error: ``, shared/real-material round 3). A report
reads them all alike: the same errors, the same diagnosis rows.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_fsm.backend import ContainerOptions, StepRequest
from slurm_fsm.executor import Executor
from slurm_fsm.report import Status
from slurm_fsm.results import (
    diagnose,
    errors_from,
    setup_error_lines,
    without_relay_prefix,
)
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

DATA = Path(__file__).parent / "data" / "real" / "local" / "slurm-26.05"

#: one relayed line in each form real Slurm prints it
FORMS = {
    "22.05/24.11": "slurmstepd-n1: error: {}",
    "no node name": "slurmstepd: error: {}",
    "26.05": "[2026-12-06T18:00:24.403] error: {}",
    "slurmd's log": "[2025-11-06T20:36:19.163] [19.0] error: {}",
    "26.05, LogTimeFormat=iso8601": "[2026-12-06T18:00:24] error: {}",
}


@pytest.mark.parametrize("form", list(FORMS))
def test_the_relay_prefix_goes_in_every_form(form: str) -> None:
    line = "pyxis:     curl: (6) Could not resolve host: registry.invalid"
    assert without_relay_prefix(FORMS[form].format(line)) == line


@pytest.mark.parametrize("line", [
    "pyxis: failed to import docker image",  # nothing relayed
    "[rank0] error: not slurmstepd's",  # a job's own bracketed tag is no time
    "srun: error: n1: task 0: Exited with exit code 1",
])
def test_a_line_nobody_relayed_stays_as_it_is(line: str) -> None:
    assert without_relay_prefix(line) == line


@pytest.mark.parametrize(("name", "expected", "symptom"), [
    ("missing_image", [
        "pyxis: failed to create container filesystem for image: /tmp/nope.sqsh",
        "pyxis:     [ERROR] No such file or directory: /tmp/nope.sqsh"],
     "pyxis: failed to create container filesystem for image"),
    ("registry_image", [
        "pyxis: failed to import docker image: registry.invalid/it/nope:1",
        "pyxis:     curl: (6) Could not resolve host: registry.invalid"],
     "pyxis: failed to import docker image"),
    ("missing_mount_source", [
        "pyxis: --container-mounts: source path does not exist: /tmp/no-such-dir",
        "pyxis: couldn't create enroot start configuration script"],
     "pyxis: --container-mounts: source path does not exist"),
])
def test_recorded_26_05_pyxis_errors(name: str, expected: list[str], symptom: str) -> None:
    """srun's stderr on the real 26.05 cluster (two nodes' lines, each with its own
    time): the pyxis lines once each, without the prefix, and the diagnosis row. The
    same lines in 22.05's form give the same."""
    text = (DATA / f"srun_pyxis_{name}.stderr").read_text()
    assert "] error: pyxis: " in text and "slurmstepd" not in text  # 26.05's own form
    got = setup_error_lines(text)
    assert got == expected
    as_22_05 = "".join("slurmstepd-n1: error: " + without_relay_prefix(line) + "\n"
                       for line in text.splitlines() if not line.startswith("srun:"))
    assert setup_error_lines(as_22_05) == got
    rows = diagnose(Status.ERROR, exit_code=None, slurm_state=None, log_empty=False,
                    log_lines=got)
    assert symptom in [r["symptom"] for r in rows]


def _relayed(form: str, lines: list[str]) -> str:
    return "".join(FORMS[form].format(line) + "\n" for line in lines)


PYXIS = ["pyxis: child 4000 failed with error code: 1",
         "pyxis: failed to import docker image: registry.invalid#it/nope:1",
         "pyxis: printing enroot log file:",
         "pyxis:     [INFO] Querying registry for permission grant",
         "pyxis:     curl: (6) Could not resolve host: registry.invalid",
         "pyxis:     [ERROR] URL https://registry.invalid/v2/ returned error code: 000",
         "pyxis: couldn't start container",
         "spank: required plugin spank_pyxis.so: task_init() failed with rc=-1",
         "Failed to invoke spank plugin stack"]


@pytest.mark.parametrize("form", list(FORMS))
def test_setup_errors_and_their_diagnosis_are_the_same_in_every_form(form: str) -> None:
    text = _relayed(form, PYXIS) + "srun: error: n1: task 0: Exited with exit code 1\n"
    got = setup_error_lines(text)
    assert got == setup_error_lines(_relayed("22.05/24.11", PYXIS))
    assert got == ["pyxis: failed to import docker image: registry.invalid#it/nope:1",
                   "pyxis:     curl: (6) Could not resolve host: registry.invalid",
                   "pyxis:     [ERROR] URL https://registry.invalid/v2/ returned error "
                   "code: 000",
                   "pyxis: couldn't start container"]
    rows = diagnose(Status.ERROR, exit_code=None, slurm_state=None, log_empty=False,
                    log_lines=got)
    assert "pyxis: failed to import docker image" in [r["symptom"] for r in rows]


@pytest.mark.parametrize("form", list(FORMS))
def test_a_relayed_error_is_an_error_line_in_every_form(form: str) -> None:
    cancel = "*** STEP 12.0 ON n1 CANCELLED AT 2026-12-06T18:00:24 ***"
    line = FORMS[form].format(cancel)
    assert errors_from(["step starts", line, "done"]) == [line]


@pytest.mark.parametrize("over", [
    {"docker_image": "/nope.sqsh"},
    {"docker_image": "registry.invalid/x:1"},
    {"container_mounts": "/nodir:/x"},
])
def test_a_fake_cluster_relaying_as_26_05_gives_the_same_report(
        make_spec: SpecFactory, over: dict[str, str]) -> None:
    """The fake relays as 22.05/24.11 or as 26.05 (``relay_timestamps``): the report of a
    container that did not start lists the same pyxis lines and diagnosis rows (its
    summary quotes srun's output as it came)."""
    reports = []
    for stamped in (False, True):
        fake = FakeCluster(path_exists=lambda p: p == "/img/a.sqsh", registry=False)
        fake.relay_timestamps = stamped
        spec = make_spec(**{"docker_image": "/img/a.sqsh", "container_name": "c",
                            "workflow_type": "custom", "skip_install": True, **over})
        reports.append(Executor(spec, fake, clock=fake.clock).run())
    old, new = reports
    assert new.status is old.status is Status.ERROR
    assert new.errors[1:] == old.errors[1:]
    assert new.diagnosis == old.diagnosis
    assert any(e.startswith("pyxis: ") for e in new.errors[1:]), new.errors


def test_the_fakes_26_05_relay_is_the_real_ones_form() -> None:
    fake = FakeCluster(path_exists=lambda _p: False)
    fake.relay_timestamps = True
    job = fake.make_job("x", fake.user, nodes=1).job_id
    got = fake.run_step(StepRequest(job_id=job, argv=("true",), nodes=1,
                                    container=ContainerOptions(name="c", image="/x.sqsh")))
    first = got.stderr.splitlines()[0]
    assert re.fullmatch(r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\] error: pyxis: child \d+ "
                        r"failed with error code: 1", first), first
