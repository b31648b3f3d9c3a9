"""Backends: who starts a run's tasks, and the job handle of a run they started. One small interface
(base.py, job.py), one module per mode, chosen by name in registry.py:

train       this very process (`dali-launch train`)
local       the job's processes on this machine (`--local`)
slurm       a SLURM job through submitit (the default)
allocation  one task of the user's own srun step (`srun dali-launch task`)
"""
