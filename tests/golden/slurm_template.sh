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

# A SIGUSR2 that reaches this shell (scancel --full or --batch) goes to the step's tasks: noted for those
# not started yet, passed on through srun to the others. A plain scancel --signal=USR2 reaches steps alone.
export DALI_LAUNCH_EARLY_USR2="$PWD"/runs/usr2-${SLURM_JOB_ID}-${SLURM_RESTART_COUNT:-0}
trap 'mkdir -p "${DALI_LAUNCH_EARLY_USR2%/*}" && : > "$DALI_LAUNCH_EARLY_USR2"; kill -USR2 ${DALI_LAUNCH_SRUN:-} 2>/dev/null' USR2
srun() { local s; (trap '' USR2; exec srun "$@") & DALI_LAUNCH_SRUN=$!; while wait $DALI_LAUNCH_SRUN; s=$?; kill -0 $DALI_LAUNCH_SRUN 2>/dev/null; do :; done; return $s; }

module load cuda

# The tasks start with SIGUSR2 blocked where env can (coreutils 8.31+): one that comes before their
# handler exists waits for it, instead of killing the task.
DALI_LAUNCH_HOLD_USR2=$(env --block-signal=USR2 true 2>/dev/null && echo "env --block-signal=USR2")
srun --kill-on-bad-exit=1 ${DALI_LAUNCH_HOLD_USR2} dali-launch task --data-dir /data/mnist --epochs 3 --gpus-per-node 8 --no-record-samples
