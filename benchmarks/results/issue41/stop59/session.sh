#!/bin/bash
# Issue 41 on one H200 (OUT: where the files go), no DALI needed; PART picks one piece, so the pieces can ride
# the calls that carry DALI's parts to the machine (~10 min in all, `all` runs the three in one call):
# matrix)  remat_matrix.py: the trainer's vit-b16 step at batch 256 without remat, with --remat blocks as
#          vit.unroll now has it (a loop), and with the blocks unrolled as before: XLA's temporaries (memory-usage
#          reports kept);
# ladder)  the ladder with --remat blocks from ViT-g/14 up (stop57: g/14 132.0 GiB with the blocks unrolled);
# offload) ViT-H/14 with AdamW's state offloaded (the issue's "with offload" rung: g/14 did not fit with it).
set -uo pipefail
part=${1:-all}
case "$part" in matrix|ladder|offload|all) ;; *) echo "usage: session.sh [matrix|ladder|offload|all]" >&2; exit 2 ;; esac
export PYTHONPATH=/tmp/dl:/tmp/site PYTHONUNBUFFERED=1
mkdir -p /tmp/dl/dali_launch && ln -sfn "$PWD/launcher" /tmp/dl/dali_launch/launcher && ln -sfn "$PWD/trainer" /tmp/dl/dali_launch/trainer
touch /tmp/dl/dali_launch/__init__.py
here=benchmarks/results/issue41/stop59
quiet() { grep -v "^W0000\|^I0000"; }
asked() { [ "$part" = "$1" ] || [ "$part" = all ]; }
if asked matrix; then
  rm -rf /tmp/dump
  XLA_FLAGS="--xla_dump_to=/tmp/dump" timeout 150 python3 $here/remat_matrix.py --model vit-b16 --out "$OUT/remat_matrix_b16.jsonl" 2>&1 | quiet | tail -4
  (cd /tmp/dump && ls -S | grep -E "sharded_call.*memory-usage-report" | head -6 | tar czf "$OUT/b16_memory_reports.tgz" -T -) 2>&1 | tail -2
fi
if asked ladder; then
  timeout 330 python3 benchmarks/mesh_step.py --parts largest --remat --rungs vit-g14,vit-G14,vit-e14 --keep-going \
    --part-timeout 150 --out "$OUT/remat_ladder.json" 2>&1 | quiet | tail -6
fi
if asked offload; then
  timeout 100 python3 benchmarks/mesh_step.py --parts largest --offload --rungs vit-h14 --part-timeout 95 \
    --out "$OUT/h14_offload.json" 2>&1 | quiet | tail -4
fi
true
