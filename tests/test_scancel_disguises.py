"""Disguised ``scancel`` calls from a persistent run's script (issue 43, item 2).

``scancel`` parses its command line with getopt_long (unique prefixes of long options,
``--opt value`` and ``--opt=value``, bundled short options), reads its job ids as numbers
(``007`` is job 7) and in comma lists, and takes filters from ``SCANCEL_*`` variables. The
shim once knew only full option names and compared ids as text, so ``scancel --acc=acct``,
``--part debug``, ``--stat=RUNNING``, ``--nodel=n1``, ``0$SLURM_JOB_ID`` and
``$SLURM_JOB_ID,$SLURM_JOB_ID`` reached the real ``scancel`` and cancelled the shared
allocation (and, run as root, other users' jobs).

The shim now parses as ``scancel`` does, refuses what it cannot prove harmless, and runs
the real ``scancel`` only with what it understood, written out in full
(:func:`canonical_problem` below checks that form independently of the parser).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_fsm.scancelshim import plan

ALLOC = "7"
OWN = ["2", "4"]

#: what the real scancel may be given: full long names only, ids as plain numbers
_FULL = re.compile(r"--(signal|full|quiet|verbose|hurry|ctld|interactive|batch|version|"
                   r"help|usage|account|name|partition|qos|reservation|state|user|"
                   r"nodelist|wckey|me)(=.*)?$", re.S)
_ID = re.compile(r"(\d+)(_(\d+|\[[\d,%-]+\]))?(\+\d+)?(\.(\d+|batch|extern))?$")


def canonical_problem(argv: list[str], allocation: str, own: list[str]) -> str:
    """What is wrong with ``argv`` as the shim's call of the real scancel ("" if
    nothing): an option not written out in full, an id that is not a plain number, the
    allocation (or a step of it that is not this run's), or filters without ids."""
    ids = [a for a in argv if not a.startswith("-")]
    options = [a for a in argv if a.startswith("-")]
    for opt in options:
        if not _FULL.match(opt):
            return f"option not canonical: {opt!r}"
    if not ids and any(not o.startswith(("--signal", "--full", "--quiet", "--verbose",
                                           "--hurry", "--ctld", "--interactive",
                                           "--version", "--help", "--usage", "--batch"))
                       for o in options):
        return f"filters without ids: {argv!r}"
    for arg in ids:
        for element in arg.split(","):
            m = _ID.match(element)
            if m is None or m.group(1) != str(int(m.group(1))):
                return f"id not canonical: {element!r}"
            if int(m.group(1)) == int(allocation):
                step = m.group(6)
                if m.group(2) or m.group(4) or step is None or step not in own:
                    return f"names the allocation: {element!r}"
    return ""


@pytest.mark.parametrize("args", [
    ["--acc=acct"], ["--part", "debug"], ["--stat=RUNNING"], ["--nodel=n1"],
    ["--us=root"], ["--wck", "w"], ["--res=r"], ["--qo", "normal"], ["--jobn=x"],
    ["-uroot"], ["-Qu", "root"], ["--quiet", "--sta", "PENDING"],
])
def test_a_filter_without_ids_is_refused_whatever_its_spelling(args: list[str]) -> None:
    p = plan(args, ALLOC, None)
    assert p.argv is None and p.status == 1, p
    assert "refused" in p.message


@pytest.mark.parametrize(("args", "expected"), [
    (["07"], ["7.2", "7.4"]),
    (["0007"], ["7.2", "7.4"]),
    (["7,7"], ["7.2", "7.4"]),
    (["8,07"], ["8", "7.2", "7.4"]),
    (["07", "7"], ["7.2", "7.4"]),
    (["--sig=USR1", "07"], ["--signal=USR1", "7.2", "7.4"]),
    (["-sKILL", "008"], ["--signal=KILL", "8"]),
    (["7.02"], ["7.2"]),
])
def test_ids_are_numbers_and_lists_as_scancel_reads_them(args: list[str],
                                                          expected: list[str]) -> None:
    p = plan(args, ALLOC, OWN)
    assert p.argv == expected, p


@pytest.mark.parametrize("args", [
    ["7.3"],            # a sibling's step in the shared allocation
    ["7.batch"], ["7.extern"], ["7_1"], ["7+0"], ["07.3"],
    ["+7"], [" 7"], ["7x"], ["7,"], [""], ["-M", "other", "8"], ["--clusters=o", "8"],
    ["--sibling=c", "8"], ["--frobnicate", "8"], ["--s", "8"],   # ambiguous prefix
    ["-Z", "8"], ["--batch", "07"], ["--cronjob", "8"],   # no scancel has it (26.05 has --cron)
])
def test_what_cannot_be_proved_harmless_is_refused(args: list[str]) -> None:
    p = plan(args, ALLOC, OWN)
    assert p.argv is None and p.status == 1, p
    assert "refused" in p.message


@pytest.mark.parametrize(("env", "args"), [
    ({"SCANCEL_USER": "root"}, []),
    ({"SCANCEL_STATE": "RUNNING"}, []),
    ({"SCANCEL_PARTITION": "debug"}, []),
    ({"SCANCEL_BATCH": "1"}, ["7"]),
    ({"SLURM_CLUSTERS": "other"}, ["8"]),
    ({"SCANCEL_SOMETHING_NEW": "x"}, ["8"]),
])
def test_scancel_variables_count_as_the_options_they_stand_for(
        env: dict[str, str], args: list[str]) -> None:
    p = plan(args, ALLOC, OWN, env)
    assert p.argv is None and p.status == 1, p


def test_scancel_variables_that_only_narrow_are_passed_as_options() -> None:
    p = plan(["8"], ALLOC, OWN, {"SCANCEL_USER": "root", "SCANCEL_VERBOSE": "1"})
    assert p.argv == ["--user=root", "--verbose", "8"], p


_WORDS = st.sampled_from([
    "7", "07", "8", "7.2", "7.3", "7,8", "08,7", "7_1", "--", "-", "-u", "root", "-s",
    "USR1", "-b", "-Q", "-bQ", "-sTERM", "--sig", "--signal=KILL", "--acc=a", "--part",
    "debug", "--stat=RUNNING", "--nodel=n1", "--me", "--batch", "--ba", "--full", "-f",
    "--name", "x", "--n", "--us", "--verb", "-v", "-V", "--ctld", "-M", "c", "--wckey",
    "-n", "-t", "PENDING", "-w", "n1", "--qos=q", "-R", "r", "-A", "acct", "7.batch",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(_WORDS, max_size=6), st.sampled_from([[], OWN]))
def test_the_real_scancel_only_ever_gets_a_canonical_harmless_command(
        args: list[str], own: list[str]) -> None:
    p = plan(args, ALLOC, own)
    if p.argv is not None:
        assert canonical_problem(p.argv, ALLOC, own) == "", (args, p)
