# Issue 38's fifth GPU session (one H200; OUT: where the files go), after .devpkgs/install-dali.sh final:
# det) ResNet-50 bf16's step alone with --deterministic's flag and what might lower its price, each traced,
#      and which kinds of kernel take the time it adds (benchmarks/kernel_time.py);
# rest) the levers the 2026-12-02 run did not reach (autotuning off, the latency-hiding scheduler, NHWC
#      convolutions, BatchNorm statistics in bf16, no donation).
mkdir -p /tmp/dl/dali_launch && ln -sfn "$PWD/launcher" /tmp/dl/dali_launch/launcher && ln -sfn "$PWD/trainer" /tmp/dl/dali_launch/trainer
touch /tmp/dl/dali_launch/__init__.py
export PYTHONPATH=/tmp/dl:/tmp/site PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
cd benchmarks
case "$1" in
  det) timeout 480 python3 step_levers.py --levers deterministic,exclude-nondeterministic,deterministic-nhwc,deterministic-bn-compute \
         --trace /tmp/traces --out $OUT/step_levers-det.json | tail -12
       timeout 90 python3 kernel_time.py /tmp/traces/baseline /tmp/traces/deterministic /tmp/traces/exclude-nondeterministic \
         /tmp/traces/deterministic-nhwc --steps 10 --top 25 | tee $OUT/kernel_time-det.txt ;;
  rest) timeout 560 python3 step_levers.py --levers autotune-0,latency-hiding,conv-nhwc,batchnorm-compute,no-donation \
          --out $OUT/step_levers-rest.json | tail -10 ;;
esac
true
