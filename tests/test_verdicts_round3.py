"""Issue 41's "Verdicts: what is wrong" items 1-4, over the real texts of
tests/data/real/round3/ (test_golden_corpus.py pins every parser over all of them).

* 1: result formats that gave nothing (lm-eval 0.3's table, lighteval's, vLLM
  ``benchmark_throughput``'s one line, evalscope's grid), lm-eval's ``samples`` rows, and
  one place for an eval's figures (``metrics.scores``);
* 2: pytest summaries before pytest 5.1 (``in 213.99 seconds``);
* 3: GPU-side failure lines: NCCL's ``Cuda failure 'out of memory'``, ``Failed to CUDA
  calloc``, its socket errors; the driver's Xid 79; torch elastic's glog lines;
* 4: pyxis: the import failures that are no image or registry problem, a container that
  does not start, and pyxis lines in slurmd's log form.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_fsm.executor import Executor
from slurm_fsm.joboutput import JobOutput
from slurm_fsm.results import (
    Status,
    diagnose,
    errors_from,
    parse_benchmark,
    parse_eval,
    parse_pytest,
    setup_error_lines,
)
from slurm_fsm.spec import WorkflowType
from slurm_fsm.testing import FakeCluster, FakeScript
from slurm_fsm.workflows import workflow

from conftest import SpecFactory

REAL = Path(__file__).resolve().parent / "data" / "real"
#: every report these tests' fake runs end with is kept in tests/data/golden_reports/
#: (the texts of each item's fix, both modes where a test runs both)
pytestmark = pytest.mark.usefixtures("golden_reports")


def real(name: str) -> list[str]:
    return (REAL / "round3" / name).read_text(encoding="utf-8").splitlines()


def _rows(lines: list[str], status: Status = Status.FAILED) -> list[dict[str, str]]:
    return diagnose(status, exit_code=1, slurm_state="FAILED", log_empty=False,
                    log_lines=lines, job_id="42")


def _symptoms(lines: list[str], status: Status = Status.FAILED) -> list[str]:
    return [r["symptom"] for r in _rows(lines, status)]


# ---------------------------------------------------------------- item 1: eval tables
def test_lm_eval_0_3_table_without_filter_and_n_shot() -> None:
    m = parse_eval(real("eval/h2ogpt35_lmeval_old_table.txt"))
    assert m["scores"]["hellaswag acc"] == 0.5189
    assert m["scores"]["hellaswag acc_norm"] == 0.693  # a blank task cell: the task above
    assert m["scores"]["winogrande acc"] == 0.6527
    assert m["scores"]["openbookqa acc_norm"] == 0.402
    assert len(m["scores"]) == 12


def test_lighteval_table() -> None:
    m = parse_eval(real("eval/smollm34_lighteval_table.txt"))
    assert m["scores"]["custom:arc:challenge:0 acc_norm"] == 0.3592
    assert m["scores"]["all acc_norm"] == 0.477
    assert m["scores"]["all prompt_level_strict_acc"] == 0.1146
    assert len(m["scores"]) == 9


def test_lm_eval_samples_rows_are_counts_not_scores() -> None:
    m = parse_eval(real("feeds/eval_lmeval922_samples_rows.txt"))
    assert m["scores"] == {"boolq acc": 0.6465, "mmlu acc": 0.2522,
                           "mmlu_humanities acc": 0.2349, "mmlu_formal_logic acc": 0.2857}


def test_one_place_for_an_evals_figures() -> None:
    """TensorRT-LLM's accuracy line and lm-eval's table, in one log: every figure is in
    ``scores``; ``accuracy`` (the ``accuracy:`` lines alone) is absent when there is
    none, never an empty list beside full scores."""
    both = parse_eval(real("eval/trtllm6967_mmlu_gsm8k_gpqa_h200.txt"))
    assert both["scores"]["MMLU accuracy"] == 80.51
    assert both["scores"]["gsm8k exact_match,flexible-extract"] == 92.7976
    assert both["accuracy"] == [80.51] and both["accuracy_by_task"] == {"MMLU": 80.51}
    table = parse_eval(real("eval/fms154_lmeval_hellaswag_yaml_built.txt"))
    assert "accuracy" not in table
    assert table["scores"] == {"hellaswag acc": 0.5739, "hellaswag acc_norm": 0.7349}
    bare = parse_eval(["accuracy: 0.87", "Evaluated accuracy: 73.880", "rouge1: 30.4512"])
    assert bare["accuracy"] == [0.87, 73.88]
    assert bare["scores"] == {"accuracy": 0.87, "Evaluated accuracy": 73.88,
                              "rouge1": 30.4512}
    assert parse_eval(["nothing here"]) == {}
    wf = workflow(WorkflowType.EVAL)
    assert wf.warnings({}) == ["no eval figures (accuracy lines, results tables, scores) "
                               "in the log"]
    assert wf.summarize({}) == "no eval figures found"


MODES = {"persistent": {}, "one-shot": {"persistent_mode": False,
                                        "log_file_pattern": "eval_%j.out"}}


@pytest.mark.parametrize("mode", MODES)
def test_an_eval_job_printing_lightevals_table_reports_its_figures_on_the_fake(
        make_spec: SpecFactory, mode: str) -> None:
    fake = FakeCluster()
    spec = make_spec(workflow_type="eval", **MODES[mode])
    lines = ("loading", *real("eval/smollm34_lighteval_table.txt"),
             *(f"cleanup {i}" for i in range(150)))  # the table far from the end
    fake.script(spec.script_path, FakeScript(lines=lines))
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.PASSED, report.render_text()
    assert report.mode == mode
    assert report.metrics["scores"]["custom:hellaswag:0 acc_norm"] == 0.5542
    assert "accuracy" not in report.metrics
    assert report.warnings == []
    assert "all acc_norm 0.477" in report.summary


# --------------------------------------------------------------- item 1: bench formats
def test_vllm_benchmark_throughput_one_line(tmp_path: Path) -> None:
    m = parse_benchmark(real("bench/vllm8914_benchmark_throughput_after.txt"), tmp_path)
    assert m["throughput"] == {"Throughput (requests/s)": 89.27,
                               "Throughput (total tokens/s)": 22853.37,
                               "Throughput (output tokens/s)": 11426.69}
    before = parse_benchmark(real("feeds/bench_vllm8914_before.txt"), tmp_path)
    assert before["throughput"] == {"Throughput (requests/s)": 81.74,
                                    "Throughput (tokens/s)": 20926.37}
    # one figure on the line: named as before (vLLM's old benchmark_serving)
    old = parse_benchmark(real("bench/vllm359_old_benchmark_serving.txt"), tmp_path)
    assert old["throughput"] == {"Throughput": 5.99}
    code = parse_benchmark(real("feeds/bench_lmdeploy_print_fstring_code.txt"), tmp_path)
    assert code["throughput"] == {} and code["latency"] == {}


def test_evalscope_grid_table(tmp_path: Path) -> None:
    lines = real("bench/vllm27776_evalscope_grid_table.txt")
    m = parse_benchmark(lines, tmp_path)
    assert m["throughput"] == {"Output token throughput (tok/s)": 963.856,
                               "Total token throughput (tok/s)": 1617.63,
                               "Request throughput (req/s)": 2.6363}
    assert m["latency"] == {"Average latency (s)": 26.3642,
                            "Average time to first token (s)": 1.1381,
                            "Average time per output token (s)": 0.07,
                            "Average inter-token latency (s)": 0.069}
    wf = workflow(WorkflowType.BENCHMARK)
    kept = [line for line in lines if wf.relevant(line)]
    assert len(kept) == 7 and all(line.startswith("| ") for line in kept)


def test_figures_far_from_the_end_are_kept(tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    log.write_text("\n".join([*real("bench/vllm27776_evalscope_grid_table.txt"),
                              *real("bench/vllm8914_benchmark_throughput_after.txt"),
                              *(f"shutdown {i}" for i in range(300))]) + "\n")
    wf = workflow(WorkflowType.BENCHMARK)
    out = JobOutput([log], relevant=wf.relevant, hint=wf.relevant_hint)
    out.finish()
    m = wf.parse(out.parser_lines(), tmp_path)
    assert m["throughput"]["Output token throughput (tok/s)"] == 963.856
    assert m["throughput"]["Throughput (output tokens/s)"] == 11426.69


# --------------------------------------------------------------- item 2: old pytest
@pytest.mark.parametrize(("name", "expected"), [
    ("pytest/numpy12452_seconds_format.txt",
     {"passed": 4686, "skipped": 362, "xfailed": 9, "warnings": 5, "seconds": 213.99}),
    ("pytest/matplotlib7974_xpassed_seconds.txt",
     {"passed": 6470, "skipped": 10, "xfailed": 6, "xpassed": 8, "seconds": 644.13}),
    ("pytest/easybuild1744_4_error_seconds.txt",
     {"passed": 4860, "skipped": 14, "deselected": 88, "xfailed": 7, "errors": 4,
      "seconds": 63.72}),
])
def test_pytest_before_5_1_says_seconds(name: str, expected: dict[str, float]) -> None:
    lines = real(name)
    assert parse_pytest(lines) == expected
    wf = workflow(WorkflowType.PYTEST)
    assert [line for line in lines if wf.relevant(line)] == [lines[0]]


def test_an_old_pytest_with_errors_fails_the_run() -> None:
    wf = workflow(WorkflowType.PYTEST)
    m = parse_pytest(real("pytest/easybuild1744_4_error_seconds.txt"))
    assert wf.verdict(m) == "pytest: 0 failed, 4 errors"
    assert wf.warnings(parse_pytest(real("pytest/numpy12452_seconds_format.txt"))) == []


# ----------------------------------------------------------------- item 3: GPU side
def test_nccl_cuda_oom_calloc_and_socket_lines() -> None:
    lines = real("gpu/nccl1235_socket_cuda_oom.txt")
    errors = errors_from(lines)
    assert any("NCCL WARN socketProgress: Connection closed by remote peer" in e
               for e in errors)
    assert any("NCCL WARN Socket recv failed" in e for e in errors)
    assert any(e.endswith("NCCL WARN Cuda failure 'out of memory'") for e in errors)
    assert any("NCCL WARN Failed to CUDA calloc 6291456 bytes" in e for e in errors)
    assert not any("NCCL INFO" in e for e in errors)
    symptoms = _symptoms(lines)
    assert "CUDA out of memory in the log" in symptoms
    assert "NCCL error in the log" in symptoms


@pytest.mark.parametrize("name", ["gpu/trtllm1670_nccl_cuda_oom_v100.txt",
                                  "gpu/opensoraplan386_nccl_info_then_cuda_oom.txt"])
def test_nccls_cuda_failure_out_of_memory_is_a_gpu_oom(name: str) -> None:
    lines = real(name)
    symptoms = _symptoms(lines)
    assert "CUDA out of memory in the log" in symptoms
    # NCCL's own OOM line is the CUDA row's; 'invalid resource handle' is NCCL's failure
    assert ("NCCL error in the log" in symptoms) == ("invalid resource handle" in "".join(lines))
    assert any("NCCL WARN Cuda failure 'out of memory'" in e for e in errors_from(lines))
    assert not any("NCCL INFO" in e for e in errors_from(lines))


def test_a_calloc_failure_alone_is_a_gpu_oom() -> None:
    line = "n1:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 64 bytes"
    assert _symptoms([line]) == ["exit 1 and FAILED", "CUDA out of memory in the log"]
    assert errors_from(["x", line]) == [line]


@pytest.mark.parametrize("name", ["gpu/gpuburn1_xid79_dmesg.txt", "gpu/ogkm1151_xid79_gsp.txt"])
def test_xid_79_a_gpu_fell_off_the_bus(name: str) -> None:
    lines = real(name)
    assert any("NVRM: Xid (PCI:0000:0" in e and "79, GPU has fallen off the bus" in e
               for e in errors_from(lines))
    rows = [r for r in _rows(lines) if r["symptom"].startswith("NVRM: Xid 79")]
    assert len(rows) == 1
    assert "a GPU was lost" in rows[0]["cause"] and "PCI:0000:0" in rows[0]["cause"]
    assert "drain" in rows[0]["advice"] and "sacct -j 42" in rows[0]["advice"]


def test_xid_79_names_the_node_when_the_line_does() -> None:
    line = "gpu-n7: [74889.644138] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus."
    row = next(r for r in _rows([line]) if r["symptom"].startswith("NVRM: Xid 79"))
    assert "on node gpu-n7" in row["cause"]
    assert "NodeName=gpu-n7" in row["advice"]


def test_torch_elastic_glog_lines() -> None:
    lines = real("gpu/robomamba10_torchrun_childfailed_sigkill.txt")
    errors = errors_from(lines)
    assert errors[0].startswith("E0325 20:57:27.620000 2606 site-packages/torch/distributed/")
    assert errors[0].endswith("failed (exitcode: -9) local_rank: 5 (pid: 2630) of binary: "
                              "/root/miniconda3/bin/python")
    row = next(r for r in _rows(lines) if r["symptom"].startswith("torch elastic"))
    assert row["symptom"] == "torch elastic: local_rank 5 failed (exitcode -9)"
    assert "signal 9 (SIGKILL)" in row["cause"]
    glog = real("feeds/err_unsloth10_glog.txt")
    assert errors_from(glog) == [glog[3]]  # the E line; the W lines are warnings
    assert not any(s.startswith("torch elastic") for s in _symptoms(glog))  # exitcode 1


# --------------------------------------------------------------------- item 4: pyxis
_IMPORT_ROW = "pyxis: failed to import docker image"


def test_run_enroot_permission_denied_is_the_nodes_configuration() -> None:
    lines = real("pyxis/pyxis12_run_enroot_permission.txt")
    rows = _rows(lines)
    symptoms = [r["symptom"] for r in rows]
    assert _IMPORT_ROW not in symptoms  # not the image path, not the registry
    row = next(r for r in rows if "Permission denied" in r["symptom"])
    assert "/run/enroot" in row["symptom"] and "node" in row["cause"]
    assert "registry" not in row["cause"] + row["advice"]


def test_no_space_left_after_authentication_is_a_full_disk() -> None:
    lines = real("pyxis/pyxis53_no_space_squashfs.txt")
    rows = _rows(lines)
    assert _IMPORT_ROW not in [r["symptom"] for r in rows]
    row = next(r for r in rows if "No space left on device" in r["symptom"])
    assert "disk" in row["cause"] and "full" in row["cause"]
    assert "the registry answered" in row["cause"]


def test_an_image_name_without_a_path_is_still_the_registry_row() -> None:
    rows = _rows(real("pyxis/pyxis127_sqsh_without_dot_slash.txt"))
    assert [r["symptom"] for r in rows if r["symptom"].startswith("pyxis")] == [_IMPORT_ROW]


def test_a_container_that_does_not_start() -> None:
    lines = real("pyxis/pyxis61_switchroot_bin_bash.txt")
    rows = [r for r in _rows(lines) if r["symptom"].startswith("pyxis")]
    assert len(rows) == 1
    assert rows[0]["symptom"] == ("pyxis: couldn't start container (enroot-switchroot: failed "
                                  "to execute: /bin/bash: No such file or directory)")
    assert "--no-container-entrypoint" in rows[0]["advice"]
    plain = _rows(["slurmstepd: error: pyxis: couldn't start container"])
    assert [r["symptom"] for r in plain if r["symptom"].startswith("pyxis")] == [
        "pyxis: couldn't start container"]


def test_pyxis_lines_in_slurmds_log_form_are_errors_too() -> None:
    lines = real("pyxis/enroot256_slurmd_log_format.txt")
    assert _IMPORT_ROW in _symptoms(lines)
    errors = errors_from(lines)
    assert "[2025-11-06T20:36:19.163] [19.0] error: pyxis: failed to import docker image" \
        in errors
    assert "[2025-11-06T20:36:19.163] [19.0] error: pyxis: couldn't start container" in errors


def test_a_setup_steps_enroot_lines_that_say_why_are_kept() -> None:
    """Slurm 22.05+ names the node (``slurmstepd-n1: error: pyxis:     mkdir: ...``):
    the enroot log line that says why is kept, and so the diagnosis of an ERROR report
    (which reads these lines) names the cause."""
    for name, why in [("pyxis12_run_enroot_permission.txt", "Permission denied"),
                      ("pyxis53_no_space_squashfs.txt", "No space left on device"),
                      ("pyxis61_switchroot_bin_bash.txt", "failed to execute")]:
        text = "\n".join(real(f"pyxis/{name}")).replace("slurmstepd: ", "slurmstepd-n1: ")
        kept = setup_error_lines(text)
        assert any(why in line for line in kept), (name, kept)
        assert any(why in s for s in _symptoms(kept, Status.ERROR)), name


@pytest.mark.parametrize(("fault", "symptom", "line"), [
    ("runtime_dir", "enroot: cannot create directory /run/enroot (Permission denied)",
     "pyxis:     mkdir: cannot create directory '/run/enroot': Permission denied"),
    ("disk_full", "enroot: No space left on device while importing the image",
     "pyxis:     Write failed because No space left on device"),
])
def test_a_setup_step_that_meets_a_node_fault_says_so_on_the_fake(
        make_spec: SpecFactory, fault: str, symptom: str, line: str) -> None:
    """The import of a persistent run's container fails for the node, not the image: the
    ERROR report's diagnosis names the node's fault, never the image path or registry."""
    fake = FakeCluster()
    fake.enroot_fault = fault
    spec = make_spec(docker_image="nvcr.io/nvidia/pytorch:24.01-py3", container_name="c",
                     workflow_type="custom", skip_install=True)
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.ERROR, report.render_text()
    symptoms = [r["symptom"] for r in report.diagnosis]
    assert symptom in symptoms and _IMPORT_ROW not in symptoms, symptoms
    assert line in report.errors  # enroot's line that says why, once for both nodes


@pytest.mark.parametrize("mode", MODES)
def test_a_job_that_lost_a_gpu_and_ran_out_of_gpu_memory_says_both_on_the_fake(
        make_spec: SpecFactory, mode: str) -> None:
    fake = FakeCluster()
    spec = make_spec(workflow_type="custom", **MODES[mode])
    lines = (*real("gpu/nccl1235_socket_cuda_oom.txt"), *real("gpu/ogkm1151_xid79_gsp.txt"))
    fake.script(spec.script_path, FakeScript(lines=lines, exit_code=1))
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.FAILED, report.render_text()
    symptoms = [r["symptom"] for r in report.diagnosis]
    assert {"CUDA out of memory in the log", "NCCL error in the log",
            "NVRM: Xid 79 (GPU has fallen off the bus)"} <= set(symptoms), symptoms
    xid = next(r for r in report.diagnosis if r["symptom"].startswith("NVRM: Xid 79"))
    # the nodes to look up: the job's (one-shot), the allocation's (persistent)
    assert f"sacct -j {report.job_id or report.allocation_id} -X" in xid["advice"]
    assert any("NCCL WARN Cuda failure 'out of memory'" in e for e in report.errors)
    assert "NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus." in report.errors


# ------------------------------------- items 1-4: each real output as a job's log
#: (file under round3/, workflow, the script's exit code, the status its report must have)
AS_A_JOBS_LOG = [
    ("eval/h2ogpt35_lmeval_old_table.txt", "eval", 0, Status.PASSED),
    ("bench/vllm8914_benchmark_throughput_after.txt", "benchmark", 0, Status.PASSED),
    ("bench/vllm27776_evalscope_grid_table.txt", "benchmark", 0, Status.PASSED),
    ("pytest/numpy12452_seconds_format.txt", "pytest", 0, Status.PASSED),
    ("pytest/easybuild1744_4_error_seconds.txt", "pytest", 0, Status.FAILED),
    ("gpu/robomamba10_torchrun_childfailed_sigkill.txt", "custom", 1, Status.FAILED),
    ("pyxis/enroot256_slurmd_log_format.txt", "custom", 1, Status.FAILED),
    ("pyxis/pyxis61_switchroot_bin_bash.txt", "custom", 1, Status.FAILED),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("name", "kind", "exit_code", "status"), AS_A_JOBS_LOG,
                         ids=[Path(c[0]).stem for c in AS_A_JOBS_LOG])
def test_each_round3_output_as_a_jobs_log_on_the_fake(
        make_spec: SpecFactory, mode: str, name: str, kind: str, exit_code: int,
        status: Status) -> None:
    """The real texts of items 1-4 printed by a job of the fake cluster, in both modes:
    the report each gives is a golden report (tests/data/golden_reports), so a change to
    what any of them says shows up as a diff. Each gives its figures, counts or rows, never
    "nothing found"."""
    fake = FakeCluster()
    spec = make_spec(workflow_type=kind, **MODES[mode])
    fake.script(spec.script_path, FakeScript(lines=tuple(real(name)), exit_code=exit_code))
    report = Executor(spec, fake, clock=fake.clock).run()
    assert (report.status, report.mode) == (status, mode), report.render_text()
    assert not [w for w in report.warnings
                if ("no " in w and "found" in w) or w.startswith("no eval figures")], \
        report.warnings
    if kind == "custom":
        assert report.diagnosis and report.errors, report.render_text()
    else:
        assert report.metrics, report.render_text()
