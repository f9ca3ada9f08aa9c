"""The spec's rules against hostile input (issue 10) and typos (issue 12 item 6).

Every bad spec is a SpecError naming the file once and each bad field by its path;
on the CLI that is exit 2 with no Slurm call and no traceback.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm import cli
from slurm_fsm.duration import Duration
from slurm_fsm.errors import SpecError
from slurm_fsm.spec import EXPIRY_MARGIN_S, MAX_SPEC_BYTES, JobSpec, PartitionInfo, SlurmParams
from slurm_fsm.testing import FakeCluster

MINIMAL: dict[str, Any] = {
    "script_path": "job.slurm",
    "work_dir": "work",
    "model_name": "llama",
    "repo_root": "/repo",
    "slurm_params": {"partition": "batch", "account": "acct"},
}


def problems_of(data: dict[str, Any], **kw: Any) -> list[str]:
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict(data, **kw)
    return info.value.problems


def with_params(**over: object) -> dict[str, Any]:
    return {**MINIMAL, "slurm_params": {**MINIMAL["slurm_params"], **over}}


@pytest.fixture
def no_slurm(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every backend the CLI would make, recorded; a bad spec must make none."""
    made: list[str] = []

    def backend(kind: str) -> FakeCluster:
        made.append(kind)
        return FakeCluster()

    def fake_for(_spec: object) -> FakeCluster:
        made.append("fake")
        return FakeCluster()

    monkeypatch.setattr(cli, "_backend", backend)
    monkeypatch.setattr(cli, "_fake_for", fake_for)
    return made


def run_cli(spec: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = cli.main(["run", str(spec), "--json", *extra])
    _out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, err


# ----------------------------------------------------------------- item 1: the file


@pytest.mark.timeout(20)
def test_a_fifo_as_the_spec_is_refused_without_hanging(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_slurm: list[str]) -> None:
    fifo = tmp_path / "job_spec.json"
    os.mkfifo(fifo)
    result: list[tuple[int, str]] = []
    t = threading.Thread(target=lambda: result.append(run_cli(fifo, capsys)), daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # unblock the reader so the test process can end
        with open(fifo, "w"):
            pass
        t.join(5)
        pytest.fail("reading a FIFO spec hung")
    code, err = result[0]
    assert code == 2
    assert str(fifo) in err and "not a regular file" in err
    assert no_slurm == []


@pytest.mark.parametrize(("path", "what"), [
    ("/dev/zero", "not a regular file"),
    (None, "is a directory"),
])
def test_devices_and_directories_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_slurm: list[str],
        path: str | None, what: str) -> None:
    target = Path(path) if path else tmp_path
    code, err = run_cli(target, capsys)
    assert code == 2
    assert str(target) in err and what in err
    assert no_slurm == []


def test_a_spec_over_the_size_bound_is_refused(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               no_slurm: list[str]) -> None:
    f = tmp_path / "job_spec.json"
    f.write_text(json.dumps({**MINIMAL, "padding": "x" * MAX_SPEC_BYTES}))
    code, err = run_cli(f, capsys)
    assert code == 2
    assert str(f) in err and "larger than" in err
    assert no_slurm == []


def test_a_spec_that_is_not_utf8_is_refused(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            no_slurm: list[str]) -> None:
    f = tmp_path / "job_spec.json"
    f.write_bytes(json.dumps(MINIMAL).encode().replace(b"llama", b"ll\xffama"))
    code, err = run_cli(f, capsys)
    assert code == 2
    assert str(f) in err and "not UTF-8" in err
    assert no_slurm == []


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,
    '{"a":' * 100_000 + "1" + "}" * 100_000,
])
def test_a_deeply_nested_spec_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         no_slurm: list[str], text: str) -> None:
    f = tmp_path / "job_spec.json"
    f.write_text(text)
    code, err = run_cli(f, capsys)
    assert code == 2
    assert str(f) in err and "nested too deeply" in err
    assert no_slurm == []


@pytest.mark.parametrize(("text", "needle"), [
    ('{"model_name": ' + "9" * 5000 + "}", "not valid JSON"),
    ('{"model_name": NaN}', "not valid JSON"),
])
def test_json_python_accepts_but_json_does_not(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "job_spec.json"
    f.write_text(text)
    with pytest.raises(SpecError) as info:
        JobSpec.from_file(f)
    assert info.value.problems[0].startswith(f"(file): {needle}")


# ----------------------------------------------------------------- item 2: NUL bytes


@pytest.mark.parametrize("field", [
    "work_dir", "model_name", "repo_root", "script_path", "alloc_job_name", "docker_image",
    "container_name", "user_root_dir", "device_type", "log_file_pattern", "success_patterns",
    "failure_patterns", "container_mounts", "slurm_params.partition", "slurm_params.account",
])
def test_a_nul_byte_in_any_text_field_is_a_field_error(field: str) -> None:
    data = json.loads(json.dumps(MINIMAL))
    if field.startswith("slurm_params."):
        data["slurm_params"][field.split(".")[1]] = "ab\x00c"
    elif field == "container_mounts":
        data[field] = "/data:/da\x00ta"
    else:
        data[field] = "ab\x00c"
    if field == "docker_image":
        data["container_name"] = "c"
    problems = problems_of(data)
    assert [p for p in problems if p.startswith(f"{field}: ")], problems
    assert any("NUL" in p for p in problems), problems


def test_nul_in_alloc_job_name_makes_no_slurm_call(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_slurm: list[str]) -> None:
    f = tmp_path / "job_spec.json"
    f.write_text(json.dumps({**MINIMAL, "alloc_job_name": "a\x00b"}))
    code, err = run_cli(f, capsys, "--backend", "fake")
    assert code == 2 and "alloc_job_name:" in err
    assert no_slurm == []


# ----------------------------------------------------------------- item 3: paths


@pytest.mark.parametrize("field", ["model_name", "log_file_pattern"])
@pytest.mark.parametrize("value", ["/etc/passwd", "../up", "a/b", "..", "."])
def test_file_name_fields_cannot_leave_work_dir(field: str, value: str) -> None:
    problems = problems_of({**MINIMAL, field: value})
    assert any(p.startswith(f"{field}: must be a file name in work_dir") for p in problems), \
        problems


def test_log_file_pattern_is_checked_in_persistent_mode_too() -> None:
    assert problems_of({**MINIMAL, "log_file_pattern": "../x_%j.out"})


# ----------------------------------------------------------------- item 4: alloc_time_limit


def test_alloc_time_limit_within_the_expiry_margin_is_refused() -> None:
    margin_min = EXPIRY_MARGIN_S // 60
    for minutes in range(1, margin_min + 1):
        problems = problems_of({**MINIMAL, "alloc_time_limit": minutes})
        assert len(problems) == 1, problems
        assert problems[0].startswith("alloc_time_limit: must be more than 00:05:00"), problems
        assert "cancelled as expiring" in problems[0]
    spec = JobSpec.from_dict({**MINIMAL, "alloc_time_limit": margin_min + 1})
    assert spec.alloc_time_limit == Duration.of_seconds(EXPIRY_MARGIN_S + 60)


def test_the_minimum_follows_the_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("slurm_fsm.spec.EXPIRY_MARGIN_S", 600)
    problems = problems_of({**MINIMAL, "alloc_time_limit": "00:08:00"})
    assert problems[0].startswith("alloc_time_limit: must be more than 00:10:00")


# ----------------------------------------------------------------- item 5: gaps


@pytest.mark.parametrize(("data", "path", "needle"), [
    ({**MINIMAL, "model_name": "m" * 100_000}, "model_name", "at most"),
    ({**MINIMAL, "alloc_job_name": "j" * 100_000}, "alloc_job_name", "at most"),
    (with_params(account="a" * 100_000), "slurm_params.account", "at most"),
    (with_params(partition="p" * 100_000), "slurm_params.partition", "at most"),
    (with_params(nodes=10**30), "slurm_params.nodes", "must be <= "),
    (with_params(nodes="1" + "0" * 30), "slurm_params.nodes", "must be <= "),
    (with_params(ntasks=10**30), "slurm_params.ntasks", "must be <= "),
    (with_params(ntasks_per_node=10**9), "slurm_params.ntasks_per_node", "must be <= "),
    (with_params(gpus_per_node=10**9), "slurm_params.gpus_per_node", "must be <= "),
    ({**MINIMAL, "monitor_timeout_seconds": 10**30}, "monitor_timeout_seconds", "must be <= "),
    ({**MINIMAL, "alloc_time_limit": "999999-00:00:00"}, "alloc_time_limit", "at most"),
    (with_params(account="a,b"), "slurm_params.account", "letters, digits"),
    (with_params(partition="a,b"), "slurm_params.partition", "letters, digits"),
    ({**MINIMAL, "alloc_job_name": "a,b"}, "alloc_job_name", "letters, digits"),
    ({**MINIMAL, "alloc_job_name": "--help"}, "alloc_job_name", "letters, digits"),
    (with_params(account="a|b"), "slurm_params.account", "letters, digits"),
    ({**MINIMAL, "slurm_env": "x86"}, "slurm_env", "must be a JSON object"),
    ({**MINIMAL, "slurm_env": {"partitions": "abc"}}, "slurm_env.partitions", "must be a list"),
    ({**MINIMAL, "slurm_env": {"partitions": ["abc"]}}, "slurm_env.partitions[0]",
     "must be a JSON object"),
    ({**MINIMAL, "slurm_env": {"partitions": [{"arch": "x86_64"}]}},
     "slurm_env.partitions[0].name", "required field missing"),
    ({**MINIMAL, "slurm_params": "batch"}, "slurm_params", "must be a JSON object"),
    ({**MINIMAL, "slurm_params": ["batch"]}, "slurm_params", "must be a JSON object"),
    (with_params(nodes="²"), "slurm_params.nodes", "must be an integer"),
])
def test_validation_gaps_are_field_errors(data: dict[str, Any], path: str, needle: str) -> None:
    problems = problems_of(data)
    mine = [p for p in problems if p.startswith(f"{path}: ")]
    assert mine and needle in mine[0], problems
    for p in problems:
        assert len(p) < 400, p  # a 100,000-character value is not echoed back
        for internal in ("string indices", "object has no attribute", "not subscriptable",
                         "invalid literal", "Exceeds the limit", "NoneType"):
            assert internal not in p, p


def test_a_name_at_the_limit_is_accepted() -> None:
    from slurm_fsm.spec import MAX_NAME_LEN

    spec = JobSpec.from_dict(with_params(account="a" * MAX_NAME_LEN))
    assert spec.slurm_params.account == "a" * MAX_NAME_LEN


# ----------------------------------------------------------------- issue 12 item 6


def test_close_unknown_keys_warn_with_did_you_mean() -> None:
    spec = JobSpec.from_dict({**MINIMAL, "sucess_patterns": "passed",
                              "monitor_timeout": 60, "other_tool_key": 1,
                              "slurm_params": {**MINIMAL["slurm_params"], "gpu_per_node": 8}})
    assert spec.load_warnings == (
        "monitor_timeout: unknown key; did you mean monitor_timeout_seconds?",
        "slurm_params.gpu_per_node: unknown key; did you mean gpus_per_node?",
        "sucess_patterns: unknown key; did you mean success_patterns?",
    )
    assert spec.success_patterns == ()


def test_strict_makes_them_errors_in_one_pass() -> None:
    problems = problems_of({**MINIMAL, "sucess_patterns": "passed", "other_tool_key": 1,
                            "slurm_params": {"partition": "", "account": "a"}}, strict=True)
    assert problems == [
        "slurm_params.partition: must be non-empty text, got ''",
        "sucess_patterns: unknown key; did you mean success_patterns?",
    ]


def test_a_refused_spec_lists_its_typos_too() -> None:
    problems = problems_of({**MINIMAL, "monitor_timeout": 5, "model_name": ""})
    assert problems == ["model_name: must be non-empty text, got ''",
                        "monitor_timeout: unknown key; did you mean monitor_timeout_seconds?"]


def test_cross_field_problems_come_with_field_problems() -> None:
    problems = problems_of({**MINIMAL, "docker_image": "img", "model_name": "a/b"})
    assert [p.split(":")[0] for p in problems] == ["model_name", "container_name"]


def test_cli_warns_on_stderr_and_strict_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "job.slurm").write_text("#!/bin/bash\ntrue\n")
    f = tmp_path / "job_spec.json"
    f.write_text(json.dumps({**MINIMAL, "repo_root": ".", "sucess_patterns": "ok"}))
    code, err = run_cli(f, capsys, "--backend", "fake", "--strict")
    assert code == 2
    assert err.count(str(f)) == 1 and "did you mean success_patterns?" in err
    assert cli.main(["plan", str(f), "--backend", "fake", "--fake-partition", "batch"]) == 0
    assert "did you mean success_patterns?" in capsys.readouterr().err


def test_the_report_carries_the_warning(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "job.slurm").write_text("#!/bin/bash\ntrue\n")
    f = tmp_path / "job_spec.json"
    f.write_text(json.dumps({**MINIMAL, "repo_root": ".", "monitor_timeout": 5}))
    assert cli.main(["run", str(f), "--json", "--quiet", "--backend", "fake",
                     "--fake-partition", "batch"]) == 0
    out, err = capsys.readouterr()
    assert any("did you mean monitor_timeout_seconds?" in w
               for w in json.loads(out)["warnings"])
    assert "did you mean monitor_timeout_seconds?" in err


def test_objects_built_in_python_get_the_same_rules() -> None:
    with pytest.raises(SpecError) as info:
        SlurmParams(partition="", account="a", nodes=0)  # type: ignore[arg-type]
    assert info.value.problems == [
        "partition: must be non-empty text, got ''",
        "nodes: must be >= 1, got 0",
    ]
    json_problems = problems_of(with_params(partition="", nodes=0))
    assert [p.removeprefix("slurm_params.") for p in json_problems] == info.value.problems
    with pytest.raises(SpecError):
        PartitionInfo(name="a,b")
    spec = JobSpec.from_dict(MINIMAL)
    import attrs

    with pytest.raises(SpecError) as info:
        attrs.evolve(spec, model_name="../x", alloc_time_limit=Duration.parse("3"))
    assert [p.split(":")[0] for p in info.value.problems] == ["model_name", "alloc_time_limit"]


def test_docs_state_the_bounds_the_code_enforces() -> None:
    from slurm_fsm import spec as s

    doc = (Path(__file__).parent.parent / "docs" / "spec.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in doc.splitlines()
            if line.startswith("| `")}
    assert f"{s.MAX_SPEC_BYTES:,}" in doc
    expect = {
        "`slurm_params.nodes`": f"1..{s.MAX_NODES}",
        "`slurm_params.ntasks`": f"1..{s.MAX_NTASKS}",
        "`slurm_params.ntasks_per_node`": f"1..{s.MAX_NTASKS_PER_NODE}",
        "`slurm_params.gpus_per_node`": f"0..{s.MAX_GPUS_PER_NODE}",
        "`monitor_timeout_seconds`": f"1..{s.MAX_SECONDS}",
        "`slurm_params.partition`": f"at most {s.MAX_NAME_LEN} characters",
        "`model_name`": f"at most {s.MAX_FILE_NAME_BYTES} bytes",
        "`alloc_time_limit`": f"More than `{Duration.of_seconds(EXPIRY_MARGIN_S)}`",
        "`docker_image`": f"at most {s.MAX_IMAGE_LEN} characters",
    }
    for field, text in expect.items():
        assert text in rows[field], (field, text)
