# On the GPU machine (one H200), from the repo root: issue 28's bad samples with nvJPEG and the hardware
# JPEG decoder (benchmarks/bad_samples_gpu.py: a tiny folders set with a text file named .jpg, a truncated
# JPEG, a JPEG with a garbage Huffman table, and both first two under --bad-samples skip; each trained with
# --platform gpu --decoder mixed --hw-decoder-load 0.9). About 2 minutes; no data to fetch.
# Expected: four PASS lines, each failing case's line naming its file, then
# "verdict: every case ended in one line". OUT: where the JSON goes.
set -x
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if ! python3 -c "import dali_launch.launcher, dali_launch.trainer" 2>/dev/null; then
  # No install: the package's two halves under a dali_launch/ folder on PYTHONPATH, as pyproject maps them.
  [ -d .devpkgs/wheels ] && python3 -m pip install -q --no-index --no-deps --target /tmp/site .devpkgs/wheels/*.whl
  mkdir -p /tmp/dl/dali_launch && ln -sfn "$PWD/launcher" /tmp/dl/dali_launch/launcher && ln -sfn "$PWD/trainer" /tmp/dl/dali_launch/trainer
  touch /tmp/dl/dali_launch/__init__.py
  export PYTHONPATH=/tmp/dl:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 benchmarks/bad_samples_gpu.py --timeout-s 240 --out "$OUT/bad_samples_gpu.json" 2>&1 | tee "$OUT/bad_samples_gpu.log"
