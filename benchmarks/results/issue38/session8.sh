# Issue 38's eighth GPU session (one H200; OUT: where the files go), after `.devpkgs/stage.sh final` (DALI's
# parts, the wheels, Fashion-MNIST's idx files and older code trees staged in /tmp/stage):
# start)  the MLP's cold start looked into: one cold run with JAX_LOG_COMPILES (each program's compile time
#         from its log), then benchmarks/startup.py cold and warm with the defaults and with XLA options that
#         shorten the step's compile (autotuning level 1; Triton GEMMs off);
# resnet) ResNet-50 bf16 `dali-launch train` on 25,600 synthetic JPEGs, batch 256, 5 epochs: the defaults,
#         --decoder cpu (DALI off the GPU: is the data wait DALI's share of the GPU?), and batch 512 at
#         learning rate 0.2 (the linear rule);
# mlp)    the MNIST MLP on Fashion-MNIST, the defaults against f9d8d52 and NVIDIA's example (benchmarks/against.py).
# notriton) the same MLP, the defaults against Triton's GEMMs off (what shortened the cold start).
case "$1" in
  start|resnet|mlp|notriton) ;;
  *) echo "usage: session8.sh start|resnet|mlp|notriton" >&2; exit 2 ;;
esac
source benchmarks/results/issue38/gpu-setup.sh >/dev/null
cd benchmarks
case "$1" in
  start)
    rm -rf /tmp/prof && JAX_LOG_COMPILES=1 timeout 120 python3 -m dali_launch.launcher.cli --local --processes 1 \
      --gpus-per-node 1 --epochs 1 --platform gpu --data-dir /tmp/fmnist --run-root /tmp/prof | tail -2
    python3 - <<'PY' | tee $OUT/cold-compiles.txt
import glob, json, re
run = sorted(glob.glob("/tmp/prof/dali-launch-*"))[-1]
first = json.loads(open(f"{run}/metrics.jsonl").readline())
print("startup", first["startup"], "first step", first["first_step_s"])
times = [(float(m.group(2)), m.group(1)) for m in re.finditer(r"Finished (.+?) in ([0-9.e-]+) sec", open(f"{run}/logs/rank-0.log").read())]
for s, what in sorted(times, reverse=True)[:12]:
    print(f"{s:8.3f}  {what}")
PY
    timeout 100 python3 startup.py --data /tmp/fmnist --epochs 2 --out $OUT/startup-defaults.json | tail -4
    timeout 100 python3 startup.py --data /tmp/fmnist --epochs 2 --extra "--xla-options xla_gpu_autotune_level=1" \
      --out $OUT/startup-autotune1.json | tail -4
    timeout 100 python3 startup.py --data /tmp/fmnist --epochs 2 --extra "--xla-options xla_gpu_enable_triton_gemm=false" \
      --out $OUT/startup-notriton.json | tail -4 ;;
  resnet)
    [ -d /tmp/synth/training ] || timeout 150 python3 -m dali_launch.launcher.cli data synth /tmp/synth \
      --format folders --train 25600 --test 2560 --classes 100 | tail -1
    for v in defaults:"" cpu:"--decoder cpu" b512:"--batch-size 512 --learning-rate 0.2"; do
      name=${v%%:*}; flags=${v#*:}
      [ "$name" = b512 ] || flags="--batch-size 256 $flags"
      timeout 150 python3 -m dali_launch.launcher.cli train --pipeline folders --data-dir /tmp/synth --num-classes 100 \
        --epochs 5 --platform gpu --model resnet50 --precision bf16 $flags --run-root /tmp/rr-$name 2>&1 \
        | grep -E "^epoch|DALI decodes|start-up" | cut -c1-220
      cp /tmp/rr-$name/*/metrics.jsonl $OUT/resnet50-$name-metrics.jsonl
    done ;;
  mlp)
    timeout 330 python3 against.py --data /tmp/fmnist --epochs 5 --passes 2 --example \
      --code f9d8d52=/tmp/stage/code/f9d8d52 --out $OUT/against.json | tail -8 ;;
  notriton)
    timeout 300 python3 against.py --data /tmp/fmnist --epochs 5 --passes 2 \
      --variant notriton="--xla-options xla_gpu_enable_triton_gemm=false" --out $OUT/against-notriton.json | tail -6 ;;
esac
true
