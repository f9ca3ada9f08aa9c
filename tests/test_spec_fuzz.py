"""Property-based fuzz of the spec loader through the CLI (issue 10).

For every hostile spec (bad JSON, wrong types, NUL bytes, huge numbers, long strings,
path traversal, deep nesting, unknown keys) ``slurm-fsm run|plan|status|release`` must:
exit 2; name the file and each bad field; print no traceback and no Python internals;
make no backend at all (so no Slurm call); write no file anywhere.

Deterministic for CI: derandomized, no example database, no deadline, a bounded number
of examples (``SPEC_FUZZ_EXAMPLES`` raises it, ``SPEC_FUZZ_RANDOM=1`` draws anew, for a
longer local hunt).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_fsm import cli
from slurm_fsm.spec import (
    MAX_CACHE_GB,
    MAX_CPUS_PER_NODE,
    MAX_CPUS_PER_TASK,
    MAX_FILE_NAME_BYTES,
    MAX_GPUS_PER_NODE,
    MAX_NAME_LEN,
    MAX_NODES,
    MAX_NTASKS,
    MAX_NTASKS_PER_NODE,
    MAX_SECONDS,
    JobSpec,
    SlurmEnv,
    SlurmParams,
)
from slurm_fsm.testing import FakeCluster

EXAMPLES = int(os.environ.get("SPEC_FUZZ_EXAMPLES", "300"))
#: SPEC_FUZZ_RANDOM=1: a new random draw each run (for hunting locally, not for CI).
DERANDOMIZE = not os.environ.get("SPEC_FUZZ_RANDOM")
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

VALID: dict[str, Any] = {
    "script_path": "job.slurm",
    "work_dir": "work",
    "model_name": "llama",
    "repo_root": ".",
    "workflow_type": "custom",
    "slurm_params": {"partition": "batch", "account": "acct"},
}

COMMANDS = [["run", "--json"], ["run", "--backend", "fake"], ["plan"], ["plan", "--json"],
            ["status"], ["release", "--json"], ["run", "--json", "--strict"]]

#: Python's own words; a person is never shown them.
INTERNALS = ("Traceback", "string indices", "object has no attribute", "not subscriptable",
             "invalid literal", "Exceeds the limit", "NoneType", "unhashable",
             "object is not iterable", "embedded null", "RecursionError", "MemoryError",
             "takes exactly", "positional argument", "KeyError", "TypeError")

SPEC_KEYS = ({f.name for f in attrs.fields(JobSpec)} - {"load_warnings"})


# ------------------------------------------------------------------------ the harness


class RecordingBackend:
    """A FakeCluster that records every method called on it."""

    def __init__(self, calls: list[str]) -> None:
        self._inner = FakeCluster()
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def record(*args: Any, **kwargs: Any) -> Any:
            self._calls.append(name)
            return attr(*args, **kwargs)

        return record


@contextlib.contextmanager
def recorded_backends() -> Iterator[list[str]]:
    """Both factories of the CLI (``_backend`` for slurm, ``_fake_for`` for fake) give
    a RecordingBackend; the list gets ``made:<kind>`` per backend and each call."""
    log: list[str] = []

    def backend(kind: str) -> RecordingBackend:
        log.append(f"made:{kind}")
        return RecordingBackend(log)

    def fake_for(_spec: object) -> RecordingBackend:
        log.append("made:fake")
        return RecordingBackend(log)

    with mock.patch.object(cli, "_backend", backend), \
            mock.patch.object(cli, "_fake_for", fake_for):
        yield log


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st_ = p.lstat()
            out[str(p.relative_to(root))] = (st_.st_size, st_.st_mtime_ns)
    return out


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


def sandbox() -> tuple[tempfile.TemporaryDirectory[str], Path, Path]:
    """``root/a/b/job_spec.json`` with its script: ``../..`` and absolute paths into root
    stay inside what is snapshotted."""
    tmp = tempfile.TemporaryDirectory(prefix="spec-fuzz-")
    root = Path(tmp.name)
    spec_dir = root / "a" / "b"
    spec_dir.mkdir(parents=True)
    (spec_dir / "job.slurm").write_text("#!/bin/bash\necho ok\n")
    return tmp, root, spec_dir / "job_spec.json"


def assert_refused(content: bytes, command: list[str]) -> list[str]:
    """Write ``content`` as the spec, run the command, check every promise; return the
    problem lines."""
    tmp, root, spec = sandbox()
    with tmp:
        spec.write_bytes(content)
        before = snapshot(root)
        with recorded_backends() as log:
            code, out, err = run_cli([command[0], str(spec), *command[1:]])
        assert code == 2, (code, err, content[:300])
        assert log == [], log  # no backend made, so no Slurm call
        assert snapshot(root) == before  # nothing written, inside work_dir or out
        assert f"invalid job spec {spec}:" in err and err.count(str(spec)) == 1, err
        assert len(err) < 20_000
        for word in INTERNALS:
            assert word not in err, err
        problems = [line[2:] for line in err.splitlines() if line.startswith("  ")]
        assert problems, err
        for line in problems:
            where = line.split(":", 1)[0]
            head = where.split(".", 1)[0].split("[", 1)[0]
            assert where in ("(file)", "(top)") or head in SPEC_KEYS, line
        if out:  # whatever stdout carries is one whole JSON document, never half of one
            json.loads(out)
        return problems


def dumps(data: object) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode("utf-8", "surrogatepass")


# ------------------------------------------------------------------- hostile values

FLOATS = st.floats(allow_nan=False, allow_infinity=False)
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | FLOATS
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6)
NOT_TEXT = st.one_of(st.integers(), FLOATS, st.booleans(),
                     st.lists(ANY_JSON, max_size=3), st.dictionaries(st.text(max_size=4),
                                                                     ANY_JSON, max_size=3))
NOT_STR_NOT_NONE = NOT_TEXT
WITH_NUL = st.tuples(st.text(max_size=10), st.text(max_size=10)).map(lambda t: f"{t[0]}\0{t[1]}")
SAFE = st.text(alphabet="abcxyz019", min_size=1, max_size=8)


def too_long(limit: int) -> st.SearchStrategy[str]:
    return st.integers(limit + 1, 100_000).map(lambda n: "n" * n)


def deep(depth_min: int = 2, depth_max: int = 50) -> st.SearchStrategy[object]:
    def nest(n: int) -> object:
        v: object = "x"
        for _ in range(n):
            v = [v]
        return v

    return st.integers(depth_min, depth_max).map(nest)


def bad_ints(lo: int, hi: int) -> st.SearchStrategy[object]:
    return st.one_of(
        st.integers(max_value=lo - 1), st.integers(min_value=hi + 1),
        st.just(10**30), st.just(str(10**30)), FLOATS,
        st.text(alphabet="abc²½٣ -+", min_size=1, max_size=6), st.booleans(),
        st.lists(st.integers(), max_size=2), st.dictionaries(SAFE, st.integers(), max_size=1),
        deep())


SLURM_NAME_BAD = st.one_of(
    NOT_TEXT, st.just(""), st.just("   "), WITH_NUL, too_long(MAX_NAME_LEN),
    st.tuples(SAFE, st.sampled_from(",|% :=\"'$;&\n\t/"), SAFE).map("".join),
    SAFE.map(lambda s: "-" + s), deep())
FILE_NAME_BAD = st.one_of(
    NOT_TEXT, st.just(""), WITH_NUL, too_long(MAX_FILE_NAME_BYTES),
    st.sampled_from([".", "..", "/", "/etc/passwd", "../../../etc/x", "a/b", "../x",
                     "..//x", "/tmp/escape"]),
    st.tuples(st.sampled_from(["../", "/", "a/", "./", "../../"]), SAFE).map("".join),
    deep())
PATH_BAD = st.one_of(NOT_TEXT, st.just(""), st.just("  "), WITH_NUL, deep())
BOOL_BAD = st.one_of(st.integers().filter(lambda i: i not in (0, 1)),
                     st.text(max_size=6).filter(
                         lambda t: t.strip().lower() not in
                         ("true", "yes", "1", "false", "no", "0")),
                     FLOATS, st.lists(st.booleans(), max_size=2),
                     st.dictionaries(SAFE, st.booleans(), max_size=1))
TIME_TEXT_BAD = st.text(alphabet="0123456789:-abcXYZ ", min_size=1, max_size=40).filter(
    lambda t: not _parses_as_time(t))
TIME_BAD = st.one_of(TIME_TEXT_BAD, FLOATS, st.booleans(),
                     st.lists(st.integers(), max_size=2), WITH_NUL, too_long(40),
                     st.integers(MAX_SECONDS // 60 + 1, 10**30),
                     st.just("999999-00:00:00"), st.integers(max_value=-1))
PATTERNS_BAD = st.one_of(st.integers(), st.booleans(), FLOATS,
                         st.dictionaries(SAFE, SAFE, max_size=2), WITH_NUL,
                         st.lists(WITH_NUL, min_size=1, max_size=3),
                         st.lists(NOT_TEXT, min_size=1, max_size=3),
                         st.lists(SAFE, min_size=257, max_size=300))
MOUNTS_BAD = st.one_of(st.integers(), st.booleans(), st.dictionaries(SAFE, SAFE, max_size=2),
                       SAFE, st.just("/a"), st.just(":/b"), st.just("/a:/b:c:d"),
                       st.tuples(SAFE, WITH_NUL).map(lambda t: f"/{t[0]}:/{t[1]}"),
                       st.lists(st.integers(), min_size=1, max_size=2))


def _parses_as_time(text: str) -> bool:
    from slurm_fsm.duration import Duration

    try:
        d = Duration.parse(text)
    except ValueError:
        return False
    return d.seconds is None or d.seconds <= MAX_SECONDS


PARAMS_BAD: dict[str, st.SearchStrategy[object]] = {
    "partition": SLURM_NAME_BAD,
    "account": SLURM_NAME_BAD,
    "nodes": bad_ints(1, MAX_NODES),
    "ntasks": bad_ints(1, MAX_NTASKS),
    "ntasks_per_node": bad_ints(1, MAX_NTASKS_PER_NODE),
    "gpus_per_node": bad_ints(0, MAX_GPUS_PER_NODE),
    "time_limit": TIME_BAD,
    "cpus_per_task": bad_ints(1, MAX_CPUS_PER_TASK),
}
SPEC_BAD: dict[str, st.SearchStrategy[object]] = {
    "script_path": PATH_BAD,
    "work_dir": PATH_BAD,
    "repo_root": PATH_BAD,
    "model_name": FILE_NAME_BAD,
    "log_file_pattern": st.one_of(FILE_NAME_BAD.filter(lambda v: v is not None)),
    "workflow_type": st.one_of(NOT_TEXT, st.text(max_size=10).filter(
        lambda t: t not in ("pytest", "eval", "benchmark", "custom"))),
    "success_patterns": PATTERNS_BAD,
    "failure_patterns": PATTERNS_BAD,
    "monitor_timeout_seconds": bad_ints(1, MAX_SECONDS),
    "build_timeout_seconds": bad_ints(1, MAX_SECONDS),
    "persistent_mode": BOOL_BAD,
    "release_allocation": BOOL_BAD,
    "build_project": BOOL_BAD,
    "skip_install": BOOL_BAD,
    "alloc_time_limit": st.one_of(TIME_BAD, st.integers(0, 5), st.sampled_from(
        ["00:05:00", "5", "00:00:30", "NOT_SET", "INVALID", "0-00:04"])),
    "docker_image": st.one_of(NOT_STR_NOT_NONE, WITH_NUL, too_long(512),
                              SAFE.map(lambda s: "-" + s), st.just("a b")),
    "container_name": st.one_of(NOT_STR_NOT_NONE, SLURM_NAME_BAD.filter(
        lambda v: v is not None)),
    "container_mounts": MOUNTS_BAD,
    "device_type": st.one_of(NOT_STR_NOT_NONE, WITH_NUL, too_long(MAX_NAME_LEN)),
    "user_root_dir": st.one_of(NOT_STR_NOT_NONE, WITH_NUL, too_long(4096)),
    "alloc_job_name": st.one_of(NOT_STR_NOT_NONE, SLURM_NAME_BAD.filter(
        lambda v: v is not None)),
    "alloc_nodes": bad_ints(1, MAX_NODES),
    "alloc_gpus_per_node": bad_ints(0, MAX_GPUS_PER_NODE),
    "alloc_cpus_per_node": bad_ints(1, MAX_CPUS_PER_NODE),
    "expected_duration_seconds": bad_ints(1, MAX_SECONDS),
    "warm_successor": BOOL_BAD,
    "image_cache_dir": st.one_of(NOT_STR_NOT_NONE, WITH_NUL, too_long(4096),
                                 SAFE.filter(lambda s: not s.startswith("/"))),
    "image_cache_max_gb": bad_ints(0, MAX_CACHE_GB),
    "slurm_env": st.one_of(
        NOT_TEXT.filter(lambda v: not isinstance(v, dict)), SAFE,
        st.fixed_dictionaries({"partitions": st.one_of(SAFE, st.integers(),
                                                        st.dictionaries(SAFE, SAFE))}),
        st.fixed_dictionaries({"partitions": st.lists(
            st.one_of(SAFE, st.integers(), st.none(), deep(),
                      st.fixed_dictionaries({"name": SLURM_NAME_BAD}),
                      st.fixed_dictionaries({"name": SAFE, "arch": st.one_of(
                          SAFE, st.integers(), WITH_NUL)})),
            min_size=1, max_size=3)})),
    "slurm_params": st.one_of(NOT_TEXT.filter(lambda v: not isinstance(v, dict)), SAFE,
                              deep(), st.just({}), st.just({"partition": "batch"})),
}
assert set(SPEC_BAD) == SPEC_KEYS, SPEC_KEYS ^ set(SPEC_BAD)  # a new field needs a row
assert set(PARAMS_BAD) == {f.name for f in attrs.fields(SlurmParams)}

UNKNOWN = st.dictionaries(
    st.text(alphabet="qwvkjz_", min_size=1, max_size=10).filter(lambda k: k not in SPEC_KEYS),
    ANY_JSON, max_size=4)


@st.composite
def bad_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A valid spec with one to three fields made bad (or a required one removed), and
    some unknown keys for noise."""
    data: dict[str, Any] = json.loads(json.dumps(VALID))
    data["slurm_params"] = dict(data["slurm_params"])
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["spec", "params", "drop"]))
        if where == "spec":
            key = draw(st.sampled_from(sorted(SPEC_BAD)))
            data[key] = draw(SPEC_BAD[key])
            if key == "docker_image":
                data.setdefault("container_name", "c")
            if key == "log_file_pattern":
                data["persistent_mode"] = False
        elif where == "params" and isinstance(data.get("slurm_params"), dict):
            key = draw(st.sampled_from(sorted(PARAMS_BAD)))
            data["slurm_params"][key] = draw(PARAMS_BAD[key])
        else:
            data.pop(draw(st.sampled_from(["script_path", "work_dir", "model_name",
                                           "repo_root", "slurm_params"])), None)
    data.update(draw(UNKNOWN))
    return data


# --------------------------------------------------------------------------- the tests


def test_the_harness_sees_backend_calls() -> None:
    """The control: a good spec through the same harness makes a backend and calls it,
    so an empty log below means no call, not a blind recorder."""
    tmp, _root, spec = sandbox()
    with tmp:
        spec.write_bytes(dumps({**VALID, "unknown_tool_key": [1, {"x": None}]}))
        with recorded_backends() as log:
            code, _out, err = run_cli(["run", str(spec), "--json", "--quiet"])
        assert code == 0, err
        assert log[0] == "made:slurm" and "allocate" in log


@FUZZ
@given(doc=bad_documents(), command=st.sampled_from(COMMANDS))
def test_hostile_fields_are_refused(doc: dict[str, Any], command: list[str]) -> None:
    problems = assert_refused(dumps(doc), command)
    assert not any(p.startswith("(file)") for p in problems)


FILE_BAD: st.SearchStrategy[bytes] = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    ANY_JSON.filter(lambda v: not isinstance(v, dict)).map(dumps),
    st.integers(1000, 100_000).map(lambda n: ("[" * n + "]" * n).encode()),
    st.integers(1000, 100_000).map(lambda n: ('{"a":' * n + "0" + "}" * n).encode()),
    st.integers(101, 20_000).map(lambda n: b'{"model_name": ' + b"7" * n + b"}"),
    st.sampled_from([b'{"nodes": NaN}', b"{\"a\": Infinity}", b"\xef\xbb\xbf[",
                     b'{"model_name": "\xff"}', b"", b"   ", b"{", b"null"]),
    st.integers(0, len(dumps(VALID)) - 1).map(lambda n: dumps(VALID)[:n]),  # truncated
)


@FUZZ
@given(content=FILE_BAD, command=st.sampled_from(COMMANDS))
def test_hostile_files_are_refused(content: bytes, command: list[str]) -> None:
    assert_refused(content, command)


VALID_NAME = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,20}", fullmatch=True)


@settings(max_examples=max(10, EXAMPLES // 10), deadline=None, derandomize=DERANDOMIZE,
          database=None)
@given(model=st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,30}", fullmatch=True),
       log_name=st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._%j-]{0,30}", fullmatch=True),
       partition=VALID_NAME, account=VALID_NAME, persistent=st.booleans(),
       extra=UNKNOWN)
def test_good_specs_write_only_in_work_dir_and_the_state_folder(
        model: str, log_name: str, partition: str, account: str, persistent: bool,
        extra: dict[str, Any]) -> None:
    """The other side: accepted names write nowhere but work_dir (and the state file's
    folder under repo_root)."""
    tmp, root, spec = sandbox()
    with tmp:
        doc = {**VALID, "model_name": model, "log_file_pattern": log_name,
               "persistent_mode": persistent,
               "slurm_params": {"partition": partition, "account": account}, **extra}
        spec.write_bytes(dumps(doc))
        before = set(snapshot(root))
        code, _out, err = run_cli(["run", str(spec), "--json", "--quiet", "--backend", "fake",
                                   "--fake-partition", partition, "--fake-account", account])
        assert "Traceback" not in err
        assert code in (0, 1), err
        work, state = spec.parent / "work", spec.parent / "work_dirs"
        for name in set(snapshot(root)) - before:
            p = root / name
            assert p in (work, state) or work in p.parents or state in p.parents, name


def test_python_built_objects_refuse_what_json_refuses() -> None:
    """Not a fuzz: the attrs side of the same rules, one example per class."""
    import pytest

    from slurm_fsm.errors import SpecError

    for build in (lambda: SlurmParams(partition="a,b", account="x"),
                  lambda: SlurmEnv(partitions=("x",)),  # type: ignore[arg-type]
                  ):
        with pytest.raises(SpecError):
            build()
    spec = JobSpec.from_dict(VALID, base_dir=Path("/b"))
    change: Callable[..., JobSpec] = attrs.evolve
    with pytest.raises(SpecError) as info:
        change(spec, work_dir=Path("/a\0b"), model_name="/etc/x")
    assert [p.split(":")[0] for p in info.value.problems] == ["work_dir", "model_name"]


PARAM_KEYS = sorted(f.name for f in attrs.fields(SlurmParams))


@FUZZ
@given(doc=st.dictionaries(st.sampled_from(sorted(SPEC_KEYS)) | st.text(max_size=6), ANY_JSON,
                           max_size=12),
       params=st.dictionaries(st.sampled_from(PARAM_KEYS) | st.text(max_size=6), ANY_JSON,
                              max_size=8),
       strict=st.booleans())
def test_any_document_is_a_spec_or_a_spec_error(doc: dict[str, Any], params: dict[str, Any],
                                                strict: bool) -> None:
    """Arbitrary JSON under the known keys: JobSpec.from_dict returns a spec or raises
    SpecError with readable lines, never another exception."""
    from slurm_fsm.errors import SpecError

    doc.setdefault("slurm_params", params)
    try:
        JobSpec.from_dict(doc, base_dir=Path("/b"), strict=strict)
    except SpecError as exc:
        assert exc.problems
        for line in exc.problems:
            assert ": " in line and len(line) < 600, line
            for word in INTERNALS:
                assert word not in line, line
