from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.duration import Duration
from slurm_fsm.errors import SpecError
from slurm_fsm.spec import JobSpec, Mount, WorkflowType

MINIMAL: dict[str, Any] = {
    "script_path": "job.slurm",
    "work_dir": "work",
    "model_name": "llama",
    "repo_root": "/repo",
    "slurm_params": {"partition": "batch", "account": "acct"},
}


def test_defaults_match_procedure_table() -> None:
    spec = JobSpec.from_dict(MINIMAL, base_dir=Path("/base"))
    assert spec.workflow_type is WorkflowType.CUSTOM
    assert spec.success_patterns == ()
    assert spec.failure_patterns == ()
    assert spec.log_file_pattern is None
    assert spec.monitor_timeout_seconds == 3600
    assert spec.persistent_mode is True
    assert spec.release_allocation is False
    assert spec.alloc_time_limit == Duration.parse("04:00:00")
    assert spec.docker_image is None and spec.container_name is None
    assert spec.container_mounts == ()
    assert spec.build_project is False and spec.skip_install is False
    assert spec.slurm_params.nodes == 1
    assert spec.job_name == "acct-trtllm.persistent"
    assert spec.script_path == Path("/base/job.slurm")
    assert spec.state_path == Path("/repo/work_dirs/.slurm_alloc.json")
    assert spec.persistent_log == Path("/base/work/llama_custom.log")


def test_patterns_mounts_and_types_parse() -> None:
    spec = JobSpec.from_dict({
        **MINIMAL,
        "success_patterns": "PASSED, all good ,",
        "failure_patterns": ["Traceback", "FAILED"],
        "container_mounts": "/data:/data:ro,/home/u:/workspace",
        "alloc_time_limit": "1-00:00:00",
        "persistent_mode": "false",
        "log_file_pattern": "llama_%j.out",
        "slurm_params": {"partition": "b", "account": "a", "nodes": "2", "time_limit": "30:00",
                         "gpus_per_node": 8},
        "slurm_env": {"partitions": [{"name": "b", "arch": "aarch64"}]},
        "alloc_job_name": "mine.persistent",
    })
    assert spec.success_patterns == ("PASSED", "all good")
    assert spec.failure_patterns == ("Traceback", "FAILED")
    assert spec.container_mounts == (Mount("/data", "/data", "ro"), Mount("/home/u", "/workspace"))
    assert spec.mounts_text == "/data:/data:ro,/home/u:/workspace"
    assert spec.alloc_time_limit.seconds == 86400
    assert spec.persistent_mode is False
    assert spec.slurm_params.nodes == 2
    assert spec.slurm_params.time_limit == Duration.parse("00:30:00")
    assert spec.slurm_env.partitions[0].arch == "aarch64"
    assert spec.job_name == "mine.persistent"


def test_every_bad_field_is_listed_by_path() -> None:
    bad = {
        **MINIMAL,
        "workflow_type": "pyt",
        "monitor_timeout_seconds": 0,
        "persistent_mode": "maybe",
        "container_mounts": "/a:/b,nocolon",
        "slurm_params": {"partition": "b", "account": "a", "nodes": 0, "time_limit": "soon"},
        "slurm_env": {"partitions": [{"name": "b", "arch": "sparc"}]},
    }
    del bad["model_name"]
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict(bad, source="job_spec.json")
    problems = info.value.problems
    text = "\n".join(problems)
    assert "slurm_params.nodes: must be >= 1, got 0" in problems
    assert "model_name: required field missing" in problems
    assert any(p.startswith("workflow_type: must be one of pytest, eval") for p in problems)
    assert any(p.startswith("monitor_timeout_seconds: must be >= 1") for p in problems)
    assert any(p.startswith("persistent_mode: must be true or false") for p in problems)
    assert any(p.startswith("container_mounts: must be host:container") for p in problems)
    assert any(p.startswith("slurm_params.time_limit: not a Slurm duration") for p in problems)
    assert any(p.startswith("slurm_env.partitions[0].arch:") for p in problems)
    assert "job_spec.json" in str(info.value)
    assert len(problems) == 8, text


def test_cross_field_rules() -> None:
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict({**MINIMAL, "persistent_mode": False, "docker_image": "img",
                           "alloc_time_limit": "NOT_SET"})
    assert info.value.problems == [  # per-field problems first, then cross-field ones
        "alloc_time_limit: must be a time limit, got NOT_SET",
        "log_file_pattern: required when persistent_mode is false",
    ]
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict({**MINIMAL, "docker_image": "img"})
    assert info.value.problems[0].startswith("container_name: required when docker_image")


def test_unknown_keys_are_ignored() -> None:
    spec = JobSpec.from_dict({**MINIMAL, "future_field": {"x": 1}})
    assert spec.model_name == "llama"


def test_from_file_resolves_relative_paths(tmp_path: Path) -> None:
    f = tmp_path / "sub" / "job_spec.json"
    f.parent.mkdir()
    f.write_text(json.dumps(MINIMAL))
    spec = JobSpec.from_file(f)
    assert spec.script_path == tmp_path / "sub" / "job.slurm"
    assert spec.work_dir == tmp_path / "sub" / "work"


@pytest.mark.parametrize(
    ("content", "expected"),
    [(None, "(file): no such file"), ("{not json", "(file): not valid JSON"),
     ("[1, 2]", "(top): must be a JSON object")],
)
def test_from_file_errors_name_the_file(tmp_path: Path, content: str | None,
                                        expected: str) -> None:
    f = tmp_path / "job_spec.json"
    if content is not None:
        f.write_text(content)
    with pytest.raises(SpecError) as info:
        JobSpec.from_file(f)
    assert str(f) in str(info.value)
    assert info.value.problems[0].startswith(expected)


def test_to_dict_round_trips() -> None:
    spec = JobSpec.from_dict({**MINIMAL, "container_mounts": "/a:/b", "workflow_type": "eval"},
                             base_dir=Path("/b"))
    again = JobSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec


def test_empty_names_and_zero_time_are_refused() -> None:
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict({**MINIMAL, "model_name": " ", "alloc_time_limit": 0,
                           "slurm_params": {"partition": "", "account": "a b"}})
    assert info.value.problems == [
        "model_name: must be non-empty text, got ' '",
        "slurm_params.partition: must be non-empty text, got ''",
        "slurm_params.account: must not contain spaces, got 'a b'",
        "alloc_time_limit: must be more than 00:05:00: an allocation with 00:05:00 or less "
        "left is cancelled as expiring, so it could never be reused; got 00:00:00",
    ]
