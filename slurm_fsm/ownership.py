"""Which Slurm jobs are ours: the one rule every caller uses.

An allocation made by slurm_fsm carries its checkout in its comment
(``salloc --comment=slurm_fsm:repo=<hash of repo_root>``, read back with
``squeue %k``). :func:`ownership` decides, for one squeue row:

* another user's job is never ours (:attr:`Ownership.OTHER`);
* a job with this checkout's tag is ours, **whatever its job name**
  (:attr:`Ownership.TAGGED`): an allocation made under an earlier
  ``alloc_job_name`` is still this checkout's, to reuse or to cancel;
* a job with any other comment is not ours: another checkout's tag
  (a copied repo, another clone) or someone's own ``--comment``
  (:attr:`Ownership.OTHER_CHECKOUT`);
* an untagged job (no comment, e.g. made by the original agent procedure) is
  ours only under one of the job names the caller expects
  (:attr:`Ownership.UNTAGGED`); under another name it is not ours
  (:attr:`Ownership.OTHER`).

Each request also carries a **nonce**: the comment is ``<tag>;req=<nonce>``
(:func:`request_comment`, what ``squeue -o %k`` shows), so that a process tells the
job *its own* salloc made (:func:`made_by`) from another run's concurrent request of
the same checkout and name, after a lost answer ("Socket timed out", salloc's output
lost). The checkout is the tag part (:func:`split_comment`): a bare tag, as the
versions before the nonce wrote it, is this checkout's too.

Validation (0C), the orphan search (0D), release (0A) and the backend's
lookup of an allocation whose salloc answer was lost all call :func:`ownership`;
the last one accepts only :attr:`Ownership.TAGGED` (its own salloc tagged the job),
and only the job of its own nonce (:func:`made_by`). No other module compares
comments (``tests/test_ownership.py`` greps for it).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Collection
from enum import Enum
from pathlib import Path

from slurm_fsm.backend import JobInfo

__all__ = [
    "REQUEST_SEP",
    "TAG_PREFIX",
    "Ownership",
    "checkout_tag",
    "describe",
    "is_slurm_fsm_comment",
    "made_by",
    "new_nonce",
    "ownership",
    "request_comment",
    "request_of",
    "split_comment",
]

#: Every slurm_fsm tag starts with this; the rest names the checkout.
TAG_PREFIX = "slurm_fsm:repo="
#: Between the checkout's tag and the request's nonce in a comment.
REQUEST_SEP = ";req="
_NONCE = re.compile(r"[0-9a-f]{8,32}")


class Ownership(Enum):
    """Whose a job is, as seen from one checkout and user."""

    TAGGED = "this checkout's (tagged)"
    UNTAGGED = "untagged, under our job name"
    OTHER_CHECKOUT = "another checkout's"
    OTHER = "not ours"

    @property
    def ours(self) -> bool:
        """To reuse, cancel or release: tagged by this checkout, or an untagged job
        under one of our names."""
        return self in (Ownership.TAGGED, Ownership.UNTAGGED)


def checkout_tag(repo_root: Path | str) -> str:
    """The ``--comment`` of a checkout's allocations: which repo root they serve."""
    digest = hashlib.sha256(str(repo_root).encode()).hexdigest()[:16]
    return f"{TAG_PREFIX}{digest}"


def new_nonce() -> str:
    """A fresh request nonce: 8 hex digits (32 random bits)."""
    return secrets.token_hex(4)


def request_comment(tag: str, nonce: str | None) -> str:
    """The ``--comment`` of one allocation request: ``<tag>;req=<nonce>`` (the bare
    tag without a nonce)."""
    if nonce is None:
        return tag
    if not _NONCE.fullmatch(nonce):
        raise ValueError(f"not a request nonce (8-32 lowercase hex digits): {nonce!r}")
    return f"{tag}{REQUEST_SEP}{nonce}"


def split_comment(comment: str) -> tuple[str, str | None]:
    """``(tag, nonce)`` of a comment :func:`request_comment` wrote; any other comment
    (a bare tag, someone's own text) is ``(comment, None)``: the whole text is then
    what must equal a tag."""
    head, sep, nonce = comment.partition(REQUEST_SEP)
    if sep and head.startswith(TAG_PREFIX) and _NONCE.fullmatch(nonce):
        return head, nonce
    return comment, None


def request_of(job: JobInfo) -> str | None:
    """The nonce of the request that made ``job`` (None: no slurm_fsm nonce)."""
    return split_comment(job.comment)[1]


def is_slurm_fsm_comment(comment: str) -> bool:
    """The comment is a slurm_fsm tag (of any checkout), with or without a nonce."""
    return split_comment(comment)[0].startswith(TAG_PREFIX)


def made_by(job: JobInfo, *, user: str, tag: str, nonce: str) -> bool:
    """``job`` is the one the request ``nonce`` of checkout ``tag`` made: ours (tagged)
    and carrying that nonce. Another run's concurrent request never is."""
    return (ownership(job, user=user, tag=tag, names=()) is Ownership.TAGGED
            and request_of(job) == nonce)


def ownership(job: JobInfo, *, user: str, tag: str, names: str | Collection[str]) -> Ownership:
    """Whose ``job`` is for ``user`` in the checkout tagged ``tag``; ``names`` are the
    job names an *untagged* job of ours may carry (tagged jobs: any name)."""
    if job.user and job.user != user:
        return Ownership.OTHER
    if job.comment:
        # the tag part decides: a bare tag (before the nonce) or tag;req=<nonce>
        return (Ownership.TAGGED if split_comment(job.comment)[0] == tag
                else Ownership.OTHER_CHECKOUT)
    wanted = {names} if isinstance(names, str) else set(names)
    return Ownership.UNTAGGED if job.name in wanted else Ownership.OTHER


def describe(job: JobInfo, owner: Ownership) -> str:
    """Why a job is not ours, for a warning."""
    if owner is Ownership.OTHER_CHECKOUT:
        what = ("another checkout's allocation" if is_slurm_fsm_comment(job.comment)
                else "a job with a comment that is not this checkout's tag")
        return f"{what} ({job.name!r} of user {job.user!r}, comment {job.comment!r})"
    return f"{job.name!r} of user {job.user!r}, comment {job.comment or '(none)'!r}"
