# Issue 38's third GPU session, last part (OUT: where the files go):
# 1. ResNet-50's first evaluation, cold (a fresh compile cache), with the evaluation's batch per device equal
#    to training's (256), so its compile may reuse training's autotuning (at the default 500 it waited 6.6 s);
# 2. the same run with XLA's nondeterministic kernels excluded (XLA_FLAGS), and the two runs' kept autotuning
#    picks (autotune.tgz): the defaults' run kept 348 (binary protos in one folder a device), the excluded
#    kernels' run none, so they cannot say which kernels the exclusion slows;
# 3. where the MLP's start-up imports go (python -X importtime, the 15 slowest).
mkdir -p /tmp/stage/wheels && cp .devpkgs/wheels/* /tmp/stage/wheels/
source benchmarks/results/issue38/gpu-setup.sh >/dev/null 2>&1
[ -d /tmp/synth/training ] || timeout 150 python3 -m dali_launch.launcher.cli data synth /tmp/synth --format folders --train 25600 --test 2560 --classes 100 | tail -1
resnet() {  # NAME, then flags
  local name=$1; shift
  timeout 200 python3 -m dali_launch.launcher.cli train --pipeline folders --data-dir /tmp/synth --num-classes 100 \
    --epochs 2 --platform gpu --model resnet50 --precision bf16 --batch-size 256 --image-size 224 \
    --compile-cache /tmp/xc-$name --run-root /tmp/rr-$name "$@" 2>&1 | grep -E "^epoch|start-up"
  cp /tmp/rr-$name/*/metrics.jsonl $OUT/resnet50-$name-metrics.jsonl
  python3 -c "
import json,glob
for l in open(glob.glob('/tmp/rr-$name/*/metrics.jsonl')[0]): e=json.loads(l); print('$name', e['epoch'], e['eval_time_s'], e.get('eval_ahead'), e['images_per_s'])"
}
resnet eval256 --eval-batch-size 256
XLA_FLAGS=--xla_gpu_exclude_nondeterministic_ops=true resnet excl256 --eval-batch-size 256
tar czf $OUT/autotune.tgz -C /tmp xc-eval256/autotune xc-excl256/autotune; find /tmp/xc-eval256/autotune /tmp/xc-excl256/autotune -type f | cut -d/ -f3 | sort | uniq -c
python3 -X importtime -c "import dali_launch.trainer.train, dali_launch.trainer.task" 2> $OUT/importtime.txt
sort -t'|' -k2 -n -r $OUT/importtime.txt | head -15
true
