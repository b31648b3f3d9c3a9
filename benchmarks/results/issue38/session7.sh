# Issue 38's seventh GPU session (one H200; OUT: where the files go), after `.devpkgs/install-dali.sh final`
# (the DALI parts, and the tensorboardX and google-crc32c wheels in /tmp/stage/wheels):
# steps) ResNet-50 bf16's step alone (benchmarks/step_levers.py): the stem pool's gradient by offset masks
#        (--pool-grad masks, trainer/model/pooling.py) against JAX's select_and_scatter, each with and without
#        --deterministic's flag, then the levers no run reached (latency-hiding scheduler, NHWC convolutions,
#        BatchNorm statistics in bf16); the pool's gradient alone both ways; then `dali-launch train` of
#        ResNet-50 bf16 on 25,600 synthetic JPEGs with --pool-grad auto (the default) and masks;
# det)   --deterministic on ResNet-50 (benchmarks/deterministic.py): twice, and killed (kill -9) + --resume,
#        against the defaults;
# mlp)   the MNIST MLP on the embedded sample (no Fashion-MNIST was staged this time): the defaults against
#        --deterministic, two passes in opposite order (benchmarks/against.py).
case "$1" in
  steps|det|mlp) ;;
  *) echo "usage: session7.sh steps|det|mlp" >&2; exit 2 ;;
esac
mkdir -p /tmp/dl/dali_launch && ln -sfn "$PWD/launcher" /tmp/dl/dali_launch/launcher && ln -sfn "$PWD/trainer" /tmp/dl/dali_launch/trainer
touch /tmp/dl/dali_launch/__init__.py
python3 -m pip install -q --no-index --no-deps --target /tmp/site /tmp/stage/wheels/*.whl
export PYTHONPATH=/tmp/dl:/tmp/site PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
cd benchmarks
case "$1" in
  steps)
    timeout 200 python3 step_levers.py --seconds 2 \
      --levers pool-masks,deterministic-pool-masks,deterministic,latency-hiding,conv-nhwc,batchnorm-compute \
      --out $OUT/step_levers.json | tail -10
    for flag in "" --deterministic; do  # the pool's gradient alone, both forms
      timeout 40 python3 pool_grad.py --batch 256 --dtype bfloat16 $flag | tail -1 | tee -a $OUT/pool_grad.jsonl
    done
    [ -d /tmp/synth/training ] || timeout 120 python3 -m dali_launch.launcher.cli data synth /tmp/synth \
      --format folders --train 25600 --test 2560 --classes 100 | tail -1
    for grad in auto masks; do
      timeout 110 python3 -m dali_launch.launcher.cli train --pipeline folders --data-dir /tmp/synth --num-classes 100 \
        --epochs 3 --platform gpu --model resnet50 --precision bf16 --batch-size 256 --pool-grad $grad \
        --run-root /tmp/rr-$grad 2>&1 | grep -E "^epoch|start-up|pool"
      cp /tmp/rr-$grad/*/metrics.jsonl $OUT/resnet50-pool-$grad-metrics.jsonl
    done ;;
  det)
    timeout 420 python3 deterministic.py --data /tmp/synth --classes 100 --variants det --out $OUT/det.json | tail -14 ;;
  mlp)
    timeout 200 python3 against.py --epochs 4 --passes 2 --variant det="--deterministic" --out $OUT/against-det.json | tail -5 ;;
esac
true
