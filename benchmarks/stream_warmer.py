"""The warm successor's warmer as ``benchmarks.stream`` starts it: ``python -m
benchmarks.stream_warmer [--no-reuse] STATE_FILE`` (the spec on stdin), which is
``python -m slurm_fsm.warmer STATE_FILE`` with two benchmark-only additions:

- the outcome of the warmer's step 0 on the successor is printed to the warmer's log
  as one line, :data:`MARK` followed by JSON: the successor's job id, the path its
  container took (``cold``, ``reused on node``, ``from the cache``, ``shared with a
  live allocation``; None when no container was set up), each part's seconds
  (:meth:`slurm_fsm.machine.AllocationMachine.setup_seconds`) and the state it stopped
  in, with the time it was printed;
- ``--no-reuse``: the check of the nodes' containers (issue 42 item 1) is never made
  (:func:`slurm_fsm.imagecache.nodes_may_keep` answers False, as under
  ``container_scope=job``), so a successor is imported and installed as before issue
  42 (the image cache is turned off by the spec, ``image_cache_max_gb: 0``, which the
  warmer receives). The library's defaults are not changed: this holds in this process
  only.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from slurm_fsm import imagecache, warmer
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.step0.context import Step0Context

#: What starts the warmer's line of the set-up in its log.
MARK = "stream-bench-setup "


def no_reuse() -> None:
    """Turn issue 42's check of the nodes' containers off in this process."""

    def never(ctx: Step0Context) -> bool:
        return False

    imagecache.nodes_may_keep = never


def record_outcomes() -> None:
    """Print :data:`MARK` + JSON after each :meth:`AllocationMachine.prepare` of this
    process (the warmer calls it once)."""
    original = AllocationMachine.prepare

    def prepare(self: AllocationMachine, **kwargs: Any) -> Any:
        done = original(self, **kwargs)
        line = {"at": time.time(), "state": done.state.value,
                "job_id": self.alloc.job_id if self.alloc is not None else None,
                "nodelist": self.alloc.nodelist if self.alloc is not None else None,
                "path": self.container_setup,
                "seconds": {k: round(v, 3) for k, v in self.setup_seconds().items()}}
        print(MARK + json.dumps(line, sort_keys=True), flush=True)
        return done

    AllocationMachine.prepare = prepare  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--no-reuse"]:
        no_reuse()
        args = args[1:]
    record_outcomes()
    return warmer.main(args)


if __name__ == "__main__":
    sys.exit(main())
