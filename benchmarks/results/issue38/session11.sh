# Issue 38's eleventh GPU session (one H200; OUT: where the files go), after `.devpkgs/stage.sh final`:
# vit)      the ViT's init since jit's backend="cpu" was dropped (6f1bb6e: the init traced on an example committed
#           to the CPU): ViT-S/16 bf16 on 2,560 synthetic JPEGs, 2 epochs, with `--attention` auto and cudnn;
# offload)  issue 41: the largest-ViT ladder with AdamW's moments in host memory (benchmarks/mesh_step.py --offload),
#           the rungs around the one that did not fit without it (ViT-H/14 trained, ViT-g/14 did not);
# remat)    issue 41: the same ladder with each block's activations recomputed (--remat blocks), from ViT-g/14 up;
# compiles) the MLP's cold start on this tree, each program's compile time from XLA's log (JAX_LOG_COMPILES);
#           then a cold and a warm `train` under cProfile (where the main thread's start-up goes: the pipelines'
#           build above all, 1.6-2.0 s here against 0.04 s on the 2-core CPU machine), kept as .prof files.
case "$1" in
  vit|compiles|offload|remat) ;;
  *) echo "usage: session11.sh vit|compiles|offload|remat" >&2; exit 2 ;;
esac
source benchmarks/results/issue38/gpu-setup.sh >/dev/null
case "$1" in
  vit)
    [ -d /tmp/synth-s/training ] || timeout 150 python3 -m dali_launch.launcher.cli data synth /tmp/synth-s \
      --format folders --train 2560 --test 512 --classes 10 | tail -1
    for attention in auto cudnn; do
      timeout 200 python3 -m dali_launch.launcher.cli train --pipeline folders --data-dir /tmp/synth-s --num-classes 10 \
        --epochs 2 --platform gpu --model vit-s16 --precision bf16 --batch-size 128 --attention $attention \
        --run-root /tmp/vit-$attention 2>&1 | grep -E "^epoch|start-up|rror|done" | cut -c1-220 | tee $OUT/vit-$attention.txt
    done ;;
  offload)
    timeout 560 python3 benchmarks/mesh_step.py --parts largest --offload --rungs ${RUNGS:-vit-h14,vit-g14,vit-G14} --keep-going \
      --part-timeout 250 --out $OUT/mesh_step_offload.json 2>&1 | tail -8 ;;
  remat)
    timeout 560 python3 benchmarks/mesh_step.py --parts largest --remat --rungs ${RUNGS:-vit-g14,vit-G14,vit-e14} --keep-going \
      --part-timeout 250 --out $OUT/mesh_step_remat.json 2>&1 | tail -8 ;;
  compiles)
    rm -rf /tmp/prof && JAX_LOG_COMPILES=1 timeout 120 python3 -m dali_launch.launcher.cli train --epochs 1 \
      --platform gpu --data-dir /tmp/fmnist --run-root /tmp/prof >/tmp/prof.log 2>&1; tail -2 /tmp/prof.log | cut -c1-200
    python3 - <<'PY' | tee $OUT/cold-compiles.txt
import glob, json, re
run = sorted(glob.glob("/tmp/prof/dali-launch-*"))[-1]
first = json.loads(open(f"{run}/metrics.jsonl").readline())
print("startup", first["startup"], "first step", first["first_step_s"])
logs = " ".join(open(p).read() for p in glob.glob(f"{run}/logs/*.log") + ["/tmp/prof.log"])
times = [(float(m.group(2)), m.group(1)) for m in re.finditer(r"Finished (.+?) in ([0-9.e-]+) sec", logs)]
for s, what in sorted(times, reverse=True)[:12]:
    print(f"{s:8.3f}  {what}")
PY
    for run in cold warm; do
      # cProfile's own -m writes nothing: the process ends through atexit and os._exit (ending.leave)
      timeout 120 python3 -c "import atexit, cProfile, runpy, sys
p = cProfile.Profile(); atexit.register(lambda: (p.disable(), p.dump_stats('$OUT/$run.prof')))
sys.argv = ['dali-launch', *sys.argv[1:]]; p.enable(); runpy.run_module('dali_launch.launcher.cli', run_name='__main__')" \
        train --epochs 1 --platform gpu --data-dir /tmp/fmnist --run-root /tmp/prof-cp 2>&1 | grep -E "start-up" | cut -c1-250
    done ;;
esac
true
