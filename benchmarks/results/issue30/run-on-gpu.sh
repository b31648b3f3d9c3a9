# On the GPU machine (one H200), after .devpkgs/install-dali.sh final, from the repository root: issue 30's
# three measurements, about 6.5 minutes in all (the step's levers 4-5, the MNIST epochs 1-1.5, start-up 0.7).
# Fashion-MNIST's four idx .gz files travel in FMNIST_SRC (default .devpkgs/fashion-mnist: a copy of
# /usr/share/datasets/fashion-mnist). OUT: where the JSON files go. PARTS: a subset, e.g. "levers startup".
set -x
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devpkgs/wheels/*.whl; python3 -c "import tensorboardX, google_crc32c"
mkdir -p /tmp/dl/dali_launch && ln -sfn "$PWD/launcher" /tmp/dl/dali_launch/launcher && ln -sfn "$PWD/trainer" /tmp/dl/dali_launch/trainer
touch /tmp/dl/dali_launch/__init__.py
export PYTHONPATH=/tmp/dl:/tmp/site PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
PARTS=${PARTS:-"levers epochs startup"}
mkdir -p "$OUT"; nproc; nvidia-smi -L
[ -d /tmp/fmnist/training ] || time python3 -m dali_launch.launcher.cli data prepare --from "${FMNIST_SRC:-.devpkgs/fashion-mnist}" --to /tmp/fmnist
# 1. ResNet-50 bf16's step alone, one lever at a time against the trainer's settings (--out rewritten per lever).
[[ $PARTS == *levers* ]] && timeout 330 python3 benchmarks/step_levers.py --out $OUT/step_levers.json
# 2. The MNIST MLP with no flags, the example's code and ours with the decoded cache (auto: host) and without.
[[ $PARTS == *epochs* ]] && CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 timeout 240 python3 benchmarks/epoch_time.py \
    --data /tmp/fmnist --epochs 5 --decoded-caches auto,off --out $OUT/epoch_time.json
# 3. Launch -> first step, cold (an empty run root) then warm (the same run root), the MLP with no flags.
[[ $PARTS == *startup* ]] && CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 timeout 180 python3 benchmarks/startup.py \
    --data /tmp/fmnist --out $OUT/startup.json
true
