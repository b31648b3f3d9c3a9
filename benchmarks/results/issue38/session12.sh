#!/bin/bash
# Issue 38's twelfth GPU session (one H200; OUT: where the files go), after `.devpkgs/stage.sh final` with
# .devpkgs/code/base.tar (`git archive 815ed53 launcher trainer`) staged: launch -> first step of the MLP, cold
# then warm (benchmarks/startup.py), of this tree (the first device call compiled beside the pipelines' build,
# on the batch expected of them: trainer/data/expected.py) against 815ed53 (compiled after the build, on its
# first batch), two passes in alternating order. OUT files are written as each part ends.
set -uo pipefail
source benchmarks/results/issue38/gpu-setup.sh
mkdir -p /tmp/stage/code/base /tmp/base/dali_launch
tar xf /tmp/stage/code/base.tar -C /tmp/stage/code/base
ln -sfn /tmp/stage/code/base/launcher /tmp/base/dali_launch/launcher
ln -sfn /tmp/stage/code/base/trainer /tmp/base/dali_launch/trainer
touch /tmp/base/dali_launch/__init__.py
startup() {  # NAME PYTHONPATH PASS
  PYTHONPATH=$2 python3 benchmarks/startup.py --data /tmp/fmnist --epochs 1 --runs 3 --out "$OUT/startup-$1-$3.json" 2>&1 | tail -5
}
startup head /tmp/dl:/tmp/site 1
startup base /tmp/base:/tmp/site 1
[ "${PASSES:-2}" = 1 ] && exit 0  # PASSES=1: one pass each, where little device time is left
startup base /tmp/base:/tmp/site 2
startup head /tmp/dl:/tmp/site 2
