"""The golden corpus: every parser over every real output in tests/data/real/.

Each file there is real output of a tool nobody here wrote (TensorRT-LLM's eval and
bench, lm-evaluation-harness, GenAI-Perf, vLLM and SGLang benchmarks, pytest 8 and 9 and
its plugins, TensorRT-LLM's C++ and NCCL failures, Slurm, sacct, scontrol, nvidia-smi,
TensorRT-LLM's tags files), with its source in tests/data/real/SOURCES.md. Text files go
through every text parser, the error lines, the hang judge and the diagnosis rows.
Beside each one, ``<name>.expected.json`` holds what the parsers must make of it; this
test runs them all and compares. A surprise from a real tool is added here first (file,
source, expected), then fixed.

``SLURM_FSM_REGEN_GOLDEN=1`` writes the expected files from today's parsers: read every
changed one before committing it (an expected file is a claim about the real tool).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.build import BuildError, build_arch, image_key, partition_arch, read_properties
from slurm_fsm.errors import JobNotFound
from slurm_fsm.joboutput import HangJudge
from slurm_fsm.jobstate import JobState
from slurm_fsm.oneshot import step_ends_of
from slurm_fsm.results import (
    Status,
    diagnose,
    errors_from,
    parse_benchmark,
    parse_eval,
    parse_pytest,
)
from slurm_fsm.slurmcli import (
    SACCT_FIELDS,
    SACCT_STEP_FIELDS,
    parse_gpu_processes,
    parse_job,
    parse_sacct,
    parse_sacct_steps,
    parse_scontrol_files,
    parse_scontrol_job,
    with_true_exit_code,
)
from slurm_fsm.spec import JobSpec

REAL = Path(__file__).resolve().parent / "data" / "real"
REGEN = os.environ.get("SLURM_FSM_REGEN_GOLDEN") == "1"


def _blocks(path: Path) -> dict[str, list[str]]:
    """``## <name> | ...`` headed blocks (comment lines ``#`` dropped); one block
    ``all`` when the file has none."""
    blocks: dict[str, list[str]] = {}
    current = "all"
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = line[3:].split("|")[0].split(" (")[0].strip()
            blocks[current] = [line]
        elif line.startswith("# ") and current == "all" and not blocks:
            continue
        else:
            blocks.setdefault(current, []).append(line)
    return blocks


def _hang_line(lines: list[str]) -> str:
    """The hang detector's line that stands once the whole text was read (as
    :class:`~slurm_fsm.joboutput.JobOutput` judges it at the end of a job), or ""."""
    judge = HangJudge()
    for line in lines:
        judge.feed(line)
    judge.close()
    return judge.hang_line


def _diagnosis(lines: list[str]) -> list[str]:
    """The symptoms the log's lines give a failed run (the status row left out)."""
    rows = diagnose(Status.FAILED, exit_code=1, slurm_state="FAILED", log_empty=False,
                    log_lines=lines)
    return [r["symptom"] for r in rows if r["symptom"] != "exit 1 and FAILED"]


def _text_parsers(lines: list[str], tmp: Path) -> dict[str, Any]:
    bench = parse_benchmark(lines, tmp)
    return {
        "pytest": parse_pytest(lines),
        "eval": parse_eval(lines),
        "benchmark": {"throughput": bench["throughput"], "latency": bench["latency"]},
        "errors": errors_from(lines),
        "hang_line": _hang_line(lines),
        "diagnosis": _diagnosis(lines),
    }


def _text_file(path: Path, tmp: Path) -> dict[str, Any]:
    return {name: _text_parsers(lines, tmp) for name, lines in _blocks(path).items()}


def _sacct_row(header: list[str], fields: list[str],
               names: tuple[str, ...] = SACCT_FIELDS) -> str:
    by_name = dict(zip(header, fields, strict=False))
    return "|".join(by_name.get(name.lower(), "") for name in names)


def _sacct_file(path: Path, _tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    columns = ""
    for name, lines in _blocks(path).items():
        head = lines[0].split(" | ", 2)
        if len(head) == 3 and head[2].strip() != "same":  # the block's column order
            columns = head[2].strip()
        rows = [line for line in lines[1:] if line.strip() and not line.startswith("scontrol:")]
        if rows and rows[0].startswith("JobID|"):
            columns, rows = rows[0], rows[1:]
        header = [c.strip().lower() for c in columns.split("|")]
        text = "\n".join(_sacct_row(header, r.split("|")) for r in rows) + "\n"
        job_id = rows[0].split("|")[header.index("jobid")]
        outcome = parse_sacct(text, job_id)
        assert outcome is not None, name
        controller = None
        for line in lines:
            if line.startswith("scontrol: "):
                controller = parse_scontrol_job(
                    f"JobId={job_id} JobState={outcome.state} {line.split(': ', 1)[1]}", job_id)
        true = with_true_exit_code(outcome, controller)
        out[name] = {
            "state": str(outcome.state), "exit_code": outcome.exit_code,
            "signal": outcome.signal, "true_exit_code": true.exit_code,
            "steps": {s.job_id: str(s.state) for s in outcome.steps},
            "states_known": all(JobState.parse(r.split("|")[header.index("state")])
                                is not JobState.UNKNOWN for r in rows),
        }
    return out


def _sacct_steps_file(path: Path, _tmp: Path) -> dict[str, Any]:
    """Each block: a header row, then sacct rows; the steps :func:`parse_sacct_steps`
    finds (the job's own row is left out)."""
    out: dict[str, Any] = {}
    for name, lines in _blocks(path).items():
        rows = [line for line in lines[1:] if line.strip()]
        header = [c.strip().lower() for c in rows[0].split("|")]
        if "jobidraw" in header:
            header[header.index("jobidraw")] = "jobid"
        text = "\n".join(_sacct_row(header, r.split("|"), SACCT_STEP_FIELDS)
                         for r in rows[1:]) + "\n"
        job_id = rows[1].split("|")[0].split(".")[0]
        out[name] = [[s.job_id, str(s.state), s.exit_code, s.signal, s.cancelled_by,
                      s.max_rss_bytes, s.memory_limit]
                     for s in parse_sacct_steps(text, job_id)]
    return out


def _command_outputs(lines: list[str]) -> list[tuple[str, str]]:
    """A block of ``$ command``, its output, ``[exit N]`` -> (command, output) pairs."""
    out: list[tuple[str, list[str]]] = []
    for line in lines[1:]:
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out and not line.startswith("[exit "):
            out[-1][1].append(line)
    return [(cmd, "\n".join(body) + "\n") for cmd, body in out]


def _outcome(outcome: Any) -> dict[str, Any]:
    return {"state": str(outcome.state), "exit_code": outcome.exit_code,
            "parts": {p.job_id: [str(p.state), p.exit_code] for p in outcome.parts}}


def _parts_file(path: Path, _tmp: Path) -> dict[str, Any]:
    """Array and het jobs: what squeue's, scontrol's and sacct's parsers make of each
    recorded command's output (issue 44)."""
    out: dict[str, Any] = {}
    for name, lines in _blocks(path).items():
        got: dict[str, Any] = {}
        for cmd, text in _command_outputs(lines):
            words = cmd.split()
            if words[0] not in ("squeue", "scontrol", "sacct") or "-X" in words:
                continue
            job_id = words[-1] if words[0] == "scontrol" else words[2]
            if words[0] == "squeue":
                try:
                    info = parse_job(text, job_id)
                    got["squeue"] = {"state": str(info.state), "parts": list(info.parts)}
                except JobNotFound:
                    got["squeue"] = "no row"
            elif words[0] == "scontrol":
                files = parse_scontrol_files(text, job_id)
                got["scontrol"] = {**_outcome(parse_scontrol_job(text, job_id)),
                                   "stdout": files.stdout.name,
                                   "tasks": [t.stdout.name for t in files.tasks],
                                   "tasks_pending": files.tasks_pending}
            else:
                outcome = parse_sacct(text, job_id)
                got["sacct"] = _outcome(outcome) if outcome is not None else None
        out[name] = got
    return out


def _sacct_np_file(path: Path, _tmp: Path) -> dict[str, Any]:
    """``sacct -n -P --format=JobID,State,ExitCode,Elapsed,MaxRSS`` as recorded (the
    one-shot time-limit jobs of Slurm 22.05): the job's outcome and how its steps ended."""
    text = path.read_text(encoding="utf-8")
    job_id = text.split("|", 1)[0]
    outcome = parse_sacct(text, job_id)
    assert outcome is not None, path
    return {"state": str(outcome.state), "exit_code": outcome.exit_code,
            "signal": outcome.signal, "steps": {s.job_id: str(s.state) for s in outcome.steps},
            "step_ends": [[e.step, str(e.state), e.signal] for e in step_ends_of(outcome)]}


def _nvidia_smi_file(path: Path, _tmp: Path) -> dict[str, Any]:
    blocks = _blocks(path)
    apps = [line for line in blocks["apps"][1:] if line.strip()]
    procs = parse_gpu_processes("0: @@slurm_fsm-node n1\n"
                                + "".join(f"0: {line}\n" for line in apps))
    names = [line for line in blocks["names"][1:] if line.strip()]
    return {
        "apps": [[p.node, p.pid, p.name, p.used_memory] for p in procs],
        "names": {line: build_arch(line) for line in names if line.startswith("NVIDIA ")
                  and "failed" not in line},
    }


def _tags_file(path: Path, tmp: Path) -> dict[str, Any]:
    spec = JobSpec.from_dict({
        "script_path": str(tmp / "job.sh"), "work_dir": str(tmp), "model_name": "m",
        "workflow_type": "custom", "repo_root": str(tmp), "persistent_mode": False,
        "log_file_pattern": "x_%j.out",
        "slurm_params": {"partition": "p", "account": "a", "nodes": 1},
    })
    try:
        props = read_properties(path)
    except BuildError as exc:
        return {"error": str(exc).replace(str(path), "<file>")}
    out: dict[str, Any] = {}
    for gpu in ("NVIDIA H100 80GB HBM3", "NVIDIA GH200 480GB"):
        arch = partition_arch(spec, gpu)
        try:
            key = image_key(props, arch, source="<file>")
            out[arch] = {"key": key, "image": props[key]}
        except BuildError as exc:
            out[arch] = {"error": str(exc)}
    return out


def _reader(path: Path) -> Any:
    rel = path.relative_to(REAL).as_posix()
    if rel.endswith(".properties"):
        return _tags_file
    if rel in ("slurm/sacct_fixtures.txt", "local/sacct_scontrol_killed.txt"):
        return _sacct_file
    if rel == "slurm/sacct_steps.txt":
        return _sacct_steps_file
    if rel == "slurm/nvidia_smi_fixtures.txt":
        return _nvidia_smi_file
    if rel == "local/slurm/arrays_hetjobs.txt":
        return _parts_file
    if rel.startswith("local/slurm-22.05/sacct_"):
        return _sacct_np_file
    return _text_file


#: inputs kept beside their outputs (the test modules, a job script): read, never parsed
INPUTS = (".expected.json", ".py.txt", ".slurm")
CORPUS = sorted(p for p in REAL.rglob("*") if p.is_file() and p.name != "SOURCES.md"
                and not p.name.endswith(INPUTS))


def test_the_corpus_holds_the_shared_real_material() -> None:
    names = {p.relative_to(REAL).as_posix() for p in CORPUS}
    assert {"trtllm/bench_blog_0.21.0rc0_pytorch_streaming.txt",
            "trtllm/bench_docs_0.17.0_throughput_run.txt",
            "trtllm/bench_docs_multimodal_sample.txt", "trtllm/eval_accuracy_readme_lines.txt",
            "trtllm/eval_lines_from_code.txt", "slurm/sacct_fixtures.txt",
            "slurm/nvidia_smi_fixtures.txt"} <= names
    assert {"eval/lm_eval_gsm8k_deepseek_r1_fp8.txt", "bench/genai_perf_trtllm_gpt2_readme.txt",
            "bench/triton_trtllm_issue1938_two_runs.txt",
            "failures/trtllm_issue1060_cpp_cuda_oom.txt", "failures/trtllm_issue1039_nccl.txt",
            "local/pytest/hangunit_rA.txt", "local/pytest/srun_l_two_ranks_rank1_fails.txt",
            "local/pytest/pytest_timeout_2.4.0_thread.txt"} <= names  # issue 25's round 2
    assert {"local/slurm-22.05/oneshot_step_timeout.out",  # recorded here (issue 44 item 6)
            "local/slurm-22.05/sacct_oneshot_step_timeout.stdout",
            "local/slurm-26.05/srun_pyxis_missing_image.stderr"} <= names
    assert len([n for n in names if n.endswith(".properties")]) == 9
    sources = (REAL / "SOURCES.md").read_text(encoding="utf-8")
    for name in names:
        assert Path(name).parent.name in sources or Path(name).name in sources, name


@pytest.mark.parametrize("path", CORPUS, ids=[p.relative_to(REAL).as_posix() for p in CORPUS])
def test_every_parser_over_every_real_output(path: Path, tmp_path: Path) -> None:
    got = json.loads(json.dumps(_reader(path)(path, tmp_path)))
    expected_path = path.with_name(path.name + ".expected.json")
    if REGEN:
        expected_path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert expected_path.exists(), f"no {expected_path.name}: run with SLURM_FSM_REGEN_GOLDEN=1"
    assert got == json.loads(expected_path.read_text(encoding="utf-8"))
