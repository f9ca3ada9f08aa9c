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

Validation (0C), the orphan search (0D), release (0A) and the backend's
lookup of an allocation whose salloc answer was lost all call :func:`ownership`;
the last one accepts only :attr:`Ownership.TAGGED` (its own salloc tagged the job).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from enum import Enum
from pathlib import Path

from slurm_fsm.backend import JobInfo

__all__ = ["TAG_PREFIX", "Ownership", "checkout_tag", "describe", "ownership"]

#: Every slurm_fsm tag starts with this; the rest names the checkout.
TAG_PREFIX = "slurm_fsm:repo="


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


def ownership(job: JobInfo, *, user: str, tag: str, names: str | Collection[str]) -> Ownership:
    """Whose ``job`` is for ``user`` in the checkout tagged ``tag``; ``names`` are the
    job names an *untagged* job of ours may carry (tagged jobs: any name)."""
    if job.user and job.user != user:
        return Ownership.OTHER
    if job.comment:
        return Ownership.TAGGED if job.comment == tag else Ownership.OTHER_CHECKOUT
    wanted = {names} if isinstance(names, str) else set(names)
    return Ownership.UNTAGGED if job.name in wanted else Ownership.OTHER


def describe(job: JobInfo, owner: Ownership) -> str:
    """Why a job is not ours, for a warning."""
    if owner is Ownership.OTHER_CHECKOUT:
        what = ("another checkout's allocation" if job.comment.startswith(TAG_PREFIX)
                else "a job with a comment that is not this checkout's tag")
        return f"{what} ({job.name!r} of user {job.user!r}, comment {job.comment!r})"
    return f"{job.name!r} of user {job.user!r}, comment {job.comment or '(none)'!r}"
