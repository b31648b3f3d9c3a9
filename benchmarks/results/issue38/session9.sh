# Issue 38's ninth GPU session (one H200; OUT: where the files go), after `.devpkgs/stage.sh final` (DALI's
# parts, the wheels and Fashion-MNIST's idx files staged in /tmp/stage):
# start)  the MLP's start-up, launch -> first step: benchmarks/startup.py, one cold run and two warm ones, the
#         defaults; then `dali-launch train` timed line by line, from `done:` to the process's exit (ending.leave);
#         then a warm `--local` run sampled by py-spy (every thread, idle ones too: where the wait goes; on
#         2026-12-05 it wrote no profile there, and the run's own line is all that came back);
# cache)  every process writes its programs (trainer/compile_cache.py) on this machine's JAX: two 2-process
#         runs on CPU devices in one run root, the second's misses named by JAX in each rank's log. Run first at
#         a0bdd1f, rank 1 failed on the hook (JAX 0.11.2's writer takes no host_callbacks); session9-cache-misses.txt
#         is the run with the hook's fix (309189f) applied there.
case "$1" in
  start|cache) ;;
  *) echo "usage: session9.sh start|cache" >&2; exit 2 ;;
esac
source benchmarks/results/issue38/gpu-setup.sh >/dev/null
cd benchmarks
case "$1" in
  start)
    timeout 150 python3 startup.py --data /tmp/fmnist --epochs 2 --runs 3 --out $OUT/startup-defaults.json | tail -6
    python3 - <<'PY' | tee $OUT/train-exit.txt
import subprocess, sys, time
argv = [sys.executable, "-m", "dali_launch.launcher.cli", "train", "--data-dir", "/tmp/fmnist", "--epochs", "1",
        "--platform", "gpu", "--run-root", "/tmp/exit-runs"]
began = time.perf_counter()
proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
done = None
for line in proc.stdout:
    if line.startswith("done:"):
        done = time.perf_counter()
proc.wait(timeout=120)
ended = time.perf_counter()
print(f"train: exit {proc.returncode}, {ended - began:.2f} s in all, done: -> exit {ended - done:.2f} s")
PY
    local=(python3 -m dali_launch.launcher.cli --local --processes 1 --gpus-per-node 1 --platform gpu --epochs 1
           --data-dir /tmp/fmnist --run-root /tmp/prof-runs)
    timeout 100 "${local[@]}" | tail -1 | cut -c1-100  # cold: fills the run root's cache
    timeout 100 py-spy record --subprocesses --idle --threads --rate 100 --format raw --nonblocking \
      -o $OUT/warm-profile.txt -- "${local[@]}" 2>&1 | grep -E "start-up|Samples" | cut -c1-200 ;;
  cache)
    python3 -c "from jax._src import compiler, compilation_cache as c, config; print('jax internals:', hasattr(compiler, '_cache_write'), hasattr(c, 'combine_executable_and_time'), hasattr(c, 'compress_executable'), hasattr(config, 'persistent_cache_min_compile_time_secs'))"
    for i in 1 2; do
      JAX_EXPLAIN_CACHE_MISSES=1 timeout 120 python3 -m dali_launch.launcher.cli --local --processes 2 --gpus-per-node 2 \
        --platform cpu --epochs 1 --run-root /tmp/cache-runs --compile-cache /tmp/cache-xla | tail -1 | cut -c1-120
    done
    run=$(ls -d /tmp/cache-runs/dali-launch-* | tail -1)
    for r in 0 1; do
      echo "rank $r, second run, misses: $(grep -o "CACHE MISS for '[a-z_]*'" $run/logs/rank-$r.log | sort | uniq -c | tr '\n' ' ')"
    done | tee $OUT/cache-misses.txt ;;
esac
true
