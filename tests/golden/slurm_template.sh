#!/bin/bash
# dali-launch in your own batch script: adapt it (account, modules, container), then `sbatch` it.
# Every task of the srun step below is one process of the run; the run directory is
# RUN_ROOT/NAME-JOBID.STEP, made once by task 0. Inside `salloc`, run the srun line alone.
#SBATCH --job-name=dali-launch
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=60
#SBATCH --partition=gpu
#SBATCH --account='proj 1'
# SIGUSR2 90 s before the time limit: the tasks checkpoint and requeue the job, which reopens
# its run directory and resumes. Without --signal, SLURM's SIGTERM at the limit still checkpoints, but
# the job ends; continue it with `dali-launch --resume RUN_DIR`.
#SBATCH --signal=USR2@90
#SBATCH --requeue
#SBATCH --open-mode=append

module load cuda

# The tasks start with SIGUSR2 blocked where env can (coreutils 8.31+): one that comes before their
# handler exists waits for it, instead of killing the task.
DALI_LAUNCH_HOLD_USR2=$(env --block-signal=USR2 true 2>/dev/null && echo "env --block-signal=USR2")
srun --kill-on-bad-exit=1 ${DALI_LAUNCH_HOLD_USR2} dali-launch task --data-dir /data/mnist --epochs 3 --gpus-per-node 8 --no-record-samples
