# On the GPU machine (one H200), set up as issue 18's run-on-gpu.sh: issue 31's three workloads.
# About 5 minutes of GPU time after the data (each part compiles once; the train part finds the step
# part's program in XLA's cache). OUT: where the JSON files go.
set -x
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devpkgs/wheels/*.whl; python3 -c "import tensorboardX, google_crc32c"
mkdir -p /tmp/dl/dali_launch && ln -sfn "$PWD/launcher" /tmp/dl/dali_launch/launcher && ln -sfn "$PWD/trainer" /tmp/dl/dali_launch/trainer
touch /tmp/dl/dali_launch/__init__.py
export PYTHONPATH=/tmp/dl:/tmp/site PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
nproc; nvidia-smi -L
[ -d /tmp/synth ] || { time python3 -m dali_launch.launcher.cli data synth /tmp/synth --format folders --train 25600 --test 2560 --classes 100; }
cd benchmarks
bench() { python3 imagenet.py --data /tmp/synth --classes 100 --gpus 1 --epochs 2 --calls 20 "$@"; }
bench --model vit-s16 --augment randaugment --mixup 0.8 --cutmix 1.0 --parts step,step-unmixed,data,train --out $OUT/vit-s16.json
bench --model vit-b16 --augment randaugment --mixup 0.8 --cutmix 1.0 --parts step,data,train --out $OUT/vit-b16.json
bench --model resnet50 --augment trivialaugment --parts step,data,train --out $OUT/resnet50-ta.json
