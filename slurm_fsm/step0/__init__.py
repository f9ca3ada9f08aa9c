"""Step 0 of procedure.md (0A-0F) as one wing of the package.

* :mod:`slurm_fsm.step0.table`: the edge table (states, the frozen observation, the
  pure conditions, the edges and the effects they carry). It decides and does nothing.
* :mod:`slurm_fsm.step0.context` (what the work is handed and remembers) and
  :mod:`slurm_fsm.step0.outcome` (what step 0 ends with).
* :mod:`slurm_fsm.step0.work`: which room does the work of each trigger and state;
  the rooms :mod:`~slurm_fsm.step0.validate`, :mod:`~slurm_fsm.step0.allocate`,
  :mod:`~slurm_fsm.step0.setup`, :mod:`~slurm_fsm.step0.release`,
  :mod:`~slurm_fsm.step0.checks`; :mod:`slurm_fsm.step0.effects`, the work of each
  edge's effects (the only place step 0 cancels or deletes);
  :mod:`slurm_fsm.step0.view`, what a person reads of the machine.

:class:`slurm_fsm.machine.AllocationMachine` drives the table: it fires the triggers
and hands each state's work to its room. Nothing is imported here:
``import slurm_fsm.step0.table`` loads the table only.
"""

__all__: list[str] = []
