"""``python -m slurm_fsm``: the same as the ``slurm-fsm`` command."""

import sys

from slurm_fsm.cli import main

sys.exit(main())
