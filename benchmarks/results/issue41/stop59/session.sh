#!/bin/bash
# Issue 41 on one H200 (OUT: where the files go): why --remat blocks barely shrinks the trainer's ViT step there.
# remat_matrix.py on vit-b16 at batch 256 (what differs from the gradient-only probe that shrank, and XLA options
# that could hoist or merge the recomputation), then vit-g14's remat step under each option; XLA's memory-usage
# reports of the b16 rows kept (XLA_FLAGS dump), gzipped; then ViT-H/14 with AdamW's state offloaded. No DALI
# needed. Parts: b16, g14 (a call each).
set -uo pipefail
export PYTHONPATH=/tmp/dl:/tmp/site PYTHONUNBUFFERED=1
mkdir -p /tmp/dl/dali_launch && ln -sfn "$PWD/launcher" /tmp/dl/dali_launch/launcher && ln -sfn "$PWD/trainer" /tmp/dl/dali_launch/trainer
touch /tmp/dl/dali_launch/__init__.py
here=benchmarks/results/issue41/stop59
case "${1:-}" in
  b16)
    rm -rf /tmp/dump
    XLA_FLAGS="--xla_dump_to=/tmp/dump" timeout 300 python3 $here/remat_matrix.py --model vit-b16 --out "$OUT/remat_matrix_b16.jsonl" 2>&1 | grep -v "^W0000\|^I0000" | tail -15
    (cd /tmp/dump && ls -S | grep -E "memory-usage-report" | head -40 | tar czf "$OUT/b16_memory_reports.tgz" -T -) 2>&1 | tail -2 ;;
  g14)
    timeout 280 python3 $here/remat_matrix.py --model vit-g14 --remat-only --out "$OUT/remat_matrix_g14.jsonl" 2>&1 | grep -v "^W0000\|^I0000" | tail -8
    # the issue's "with offload" rung: g/14 did not fit with it (stop57/g14_offload.json), H/14 was never run so
    timeout 250 python3 benchmarks/mesh_step.py --parts largest --offload --rungs vit-h14 --out "$OUT/h14_offload.json" 2>&1 | tail -4 ;;
  *) echo "usage: session.sh b16|g14" >&2; exit 2 ;;
esac
true
