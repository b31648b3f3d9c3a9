# Issue 38's third GPU session: --deterministic with autotuning kept (its picks in the run root) on ResNet-50
# bf16 b256. `a`: the defaults, det-1/det-2/det-cut, and cut-root (killed and resumed from det-1's cache);
# `b`: the defaults, the excluded kernels autotuned afresh twice, and the old flag (autotuning off).
# Kept here as session3-deterministic-a.json and -b.json.
source benchmarks/results/issue38/gpu-setup.sh
cd benchmarks
case "$1" in
  a) timeout 580 python3 deterministic.py --data /tmp/synth --classes 100 --variants det,root --out $OUT/det-a.json ;;
  b) timeout 580 python3 deterministic.py --data /tmp/synth --classes 100 --variants exclude,ops --out $OUT/det-b.json ;;
esac
true
