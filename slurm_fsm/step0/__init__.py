"""Step 0 of procedure.md (0A-0F) as one wing of the package.

* :mod:`slurm_fsm.step0.table`: the edge table (states, the frozen observation, the
  pure conditions, the edges and the effects they carry). It decides and does nothing.

:class:`slurm_fsm.machine.AllocationMachine` drives the table and does each state's
work. Nothing is imported here: ``import slurm_fsm.step0.table`` loads the table only.
"""

__all__: list[str] = []
