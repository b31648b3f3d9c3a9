# Issue 38's sixth GPU session (one H200; OUT: where the files go), after .devpkgs/install-dali.sh final:
# det) ResNet-50 bf16's step alone: the stem pool's gradient by offset masks (--pool-grad masks,
#      trainer/model/pooling.py) with and without --deterministic's flag, each traced, and by kind of kernel;
# rest) the levers no run has reached yet (the latency-hiding scheduler, NHWC convolutions, BatchNorm
#      statistics in bf16, no donation; autotuning off last: its compiles take minutes).
mkdir -p /tmp/dl/dali_launch && ln -sfn "$PWD/launcher" /tmp/dl/dali_launch/launcher && ln -sfn "$PWD/trainer" /tmp/dl/dali_launch/trainer
touch /tmp/dl/dali_launch/__init__.py
export PYTHONPATH=/tmp/dl:/tmp/site PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
cd benchmarks
case "$1" in
  det) timeout 420 python3 step_levers.py --levers pool-masks,deterministic,deterministic-pool-masks \
         --trace /tmp/traces --out $OUT/step_levers-pool.json | tail -8
       timeout 90 python3 kernel_time.py /tmp/traces/baseline /tmp/traces/pool-masks /tmp/traces/deterministic \
         /tmp/traces/deterministic-pool-masks --steps 10 --top 25 | tee $OUT/kernel_time-pool.txt
       for flag in "" --deterministic; do  # the pool's gradient alone, both forms
         timeout 60 python3 pool_grad.py --batch 256 --dtype bfloat16 $flag | tee -a $OUT/pool_grad.jsonl
       done ;;
  rest) timeout 560 python3 step_levers.py --levers latency-hiding,conv-nhwc,batchnorm-compute,no-donation,autotune-0 \
          --out $OUT/step_levers-rest.json | tail -10 ;;
esac
true
