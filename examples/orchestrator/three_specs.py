"""An orchestrator: three job specs through one persistent allocation, then release.

    python examples/orchestrator/three_specs.py [REPO_ROOT] [--partition P] [--account A]

It loads the pytest, eval and custom examples, points them at one checkout
(REPO_ROOT, default: a fresh folder under work_dirs/), runs them one after the other
through one :class:`slurm_fsm.Allocation` (the first allocates; the other two reuse
it: no queue wait, no salloc), prints one line per report, and releases the
allocation when the ``with`` block ends. Exit code 0 when all three passed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import attrs

from slurm_fsm import Allocation, JobSpec, Status, SubprocessBackend

EXAMPLES = Path(__file__).resolve().parent.parent


def load(kind: str, repo_root: Path, partition: str, account: str) -> JobSpec:
    spec = JobSpec.from_file(EXAMPLES / kind / "job_spec.json")
    return attrs.evolve(
        spec, repo_root=repo_root, work_dir=repo_root / "work" / kind,
        slurm_params=attrs.evolve(spec.slurm_params, partition=partition, account=account),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo_root", nargs="?", type=Path,
                        default=Path("work_dirs") / "orchestrator")
    parser.add_argument("--partition", default="debug")
    parser.add_argument("--account", default="acct")
    args = parser.parse_args(argv)
    root = args.repo_root.resolve()
    # The first spec decides the allocation's size: the custom example asks for 2 nodes,
    # the others for 1, so it goes first and the others fit in it (SHARING_RULES: "at
    # least as many nodes"). In the other order the third run would replace it.
    specs = [load(kind, root, args.partition, args.account)
             for kind in ("custom", "pytest", "eval")]
    ok = True
    with Allocation(root, SubprocessBackend()) as alloc:
        for spec in specs:
            for problem in alloc.reuse_problems(spec):
                print(f"{spec.workflow_type.value:8} will not reuse as is: {problem}")
            t0 = time.monotonic()
            report = alloc.run(spec)
            ok = ok and report.status is Status.PASSED
            print(f"{spec.workflow_type.value:8} {report.status.name:8} allocation "
                  f"{report.allocation_id} {' -> '.join(report.path)} "
                  f"({time.monotonic() - t0:.2f} s)")
        print(alloc.status().render_text())
    print(f"released: {alloc.reports[-1].summary}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
