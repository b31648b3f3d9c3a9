# Issue 38's fourth GPU session (one H200; OUT: where the files go), after .devpkgs/install-dali.sh final:
# vit) ViT-S/16 with RandAugment + mixup + cutmix: `dali-launch train`'s rate against its step alone, one run;
# eval) ResNet-50 bf16 b256 with no evaluation flag: the first evaluation with `--eval-batch-size` auto.
mkdir -p /tmp/stage/wheels && cp .devpkgs/wheels/* /tmp/stage/wheels/
source benchmarks/results/issue38/gpu-setup.sh >/dev/null 2>&1
[ -d /tmp/synth/training ] || timeout 150 python3 -m dali_launch.launcher.cli data synth /tmp/synth --format folders --train 25600 --test 2560 --classes 100 | tail -1
case "$1" in
  vit) cd benchmarks && timeout 420 python3 imagenet.py --data /tmp/synth --classes 100 --gpus 1 --epochs 2 --calls 20 \
         --model vit-s16 --augment randaugment --mixup 0.8 --cutmix 1.0 --parts step,train --out $OUT/vit-s16.json 2>&1 | tail -25 ;;
  eval) timeout 240 python3 -m dali_launch.launcher.cli train --pipeline folders --data-dir /tmp/synth --num-classes 100 \
          --epochs 2 --platform gpu --model resnet50 --precision bf16 --batch-size 256 --image-size 224 \
          --run-root /tmp/rr-auto 2>&1 | grep -E "^epoch|start-up|eval"
        cp /tmp/rr-auto/*/metrics.jsonl $OUT/resnet50-evalauto-metrics.jsonl
        python3 -c "
import json,glob
for l in open(glob.glob('/tmp/rr-auto/*/metrics.jsonl')[0]): e=json.loads(l); print('auto', e['epoch'], e['eval_time_s'], e.get('eval_ahead'), e['images_per_s'])" ;;
esac
true
