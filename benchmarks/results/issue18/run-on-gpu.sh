# On the GPU machine after install-dali.sh final: the ImageNet-class benchmark (issue 18).
set -x
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devpkgs/wheels/*.whl; python3 -c "import tensorboardX, google_crc32c"
mkdir -p /tmp/dl/dali_launch && ln -sfn "$PWD/launcher" /tmp/dl/dali_launch/launcher && ln -sfn "$PWD/trainer" /tmp/dl/dali_launch/trainer
touch /tmp/dl/dali_launch/__init__.py
export PYTHONPATH=/tmp/dl:/tmp/site PYTHONUNBUFFERED=1
nproc; nvidia-smi -L; df -h /tmp | tail -1
[ -d /tmp/synth ] || { time python3 -m dali_launch.launcher.cli data synth /tmp/synth --format folders --train ${SYNTH:-51200} --test 5120 --classes 100; }
du -sh /tmp/synth/training
[ -n "$SKIP_BENCH" ] || (cd benchmarks && python3 imagenet.py --data /tmp/synth --classes 100 --gpus 1 --epochs ${EPOCHS:-3} --out $OUT/imagenet.json --plot $OUT/imagenet.png "$@")
IFS=";"; for flags in ${VARIANTS}; do IFS=" "
  rm -rf /tmp/variant
  python3 -m dali_launch.launcher.cli train --pipeline folders --data-dir /tmp/synth --num-classes 100 --model resnet50 --precision bf16 --batch-size 256 --image-size 224 --epochs 3 --platform gpu --run-root /tmp/variant $flags > $OUT/variant-${flags// /_}.log 2>&1
  echo "== variant $flags rc=$?"; grep "rank 0" $OUT/variant-${flags// /_}.log | head -2
  python3 -c "
import json,glob
for l in open(glob.glob('/tmp/variant/*/metrics.jsonl')[0]): m=json.loads(l); print(m['epoch'], round(m['images_per_s_per_device']), round(m['data_wait_fraction'],3), m['test_accuracy'], m.get('compile_s'))"
done
