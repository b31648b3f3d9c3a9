# Issue 38's third GPU session, last part: ResNet-50's first evaluation, cold (fresh compile caches), with
# the evaluation's batch per device equal to training's (256) so its compile can reuse training's autotuning;
# and where the MLP's start-up imports go (python -X importtime, the 15 slowest).
mkdir -p /tmp/stage/wheels && cp .devpkgs/wheels/* /tmp/stage/wheels/
source benchmarks/results/issue38/gpu-setup.sh >/dev/null 2>&1
[ -d /tmp/synth/training ] || timeout 150 python3 -m dali_launch.launcher.cli data synth /tmp/synth --format folders --train 25600 --test 2560 --classes 100
for eb in ${EVAL_BATCHES:-256}; do
  timeout 200 python3 -m dali_launch.launcher.cli train --pipeline folders --data-dir /tmp/synth --num-classes 100 \
    --epochs 2 --platform gpu --model resnet50 --precision bf16 --batch-size 256 --image-size 224 \
    --eval-batch-size $eb --compile-cache /tmp/xc-$eb --run-root /tmp/rr-$eb 2>&1 | grep -E "^epoch|start-up"
  cp /tmp/rr-$eb/*/metrics.jsonl $OUT/resnet50-eval$eb-metrics.jsonl
  python3 -c "
import json,glob
for l in open(glob.glob('/tmp/rr-$eb/*/metrics.jsonl')[0]): e=json.loads(l); print(e['epoch'], e['eval_time_s'], e.get('eval_ahead'), e['images_per_s'])"
done
python3 -X importtime -c "import dali_launch.trainer.train, dali_launch.trainer.task" 2> $OUT/importtime.txt
sort -t'|' -k2 -n -r $OUT/importtime.txt | head -15
true
