# Issue 41 on one H200 (OUT: where the files go), after .devpkgs/install-dali.sh final:
# 1. the example's MLP with no flags: --mesh auto on a GPU (XLA's pool read from the device) stays data parallel;
# 2. a model twice the GPU's memory with AdamW (huge_mlp.py) is refused in one line, before its state is made.
mkdir -p /tmp/stage/wheels /tmp/stage/fm && cp .devpkgs/wheels/* /tmp/stage/wheels/ && cp .devpkgs/fm-*/* /tmp/stage/fm/
source benchmarks/results/issue38/gpu-setup.sh >/dev/null 2>&1
timeout 200 python3 -m dali_launch.launcher.cli train --data-dir /tmp/fmnist --epochs 2 --run-root /tmp/rr-mlp 2>&1 | grep -E "^rank|^epoch"
python3 -c "import json,glob; r=json.load(open(glob.glob('/tmp/rr-mlp/*/rank_map.json')[0]))[0]; print('mesh', r['resolved']['mesh'], 'state bytes per device', r['state_bytes_per_device'])"
export PYTHONPATH=$PYTHONPATH:$PWD/benchmarks/results/issue41
/usr/bin/time -f "%e s to the refusal" timeout 200 python3 -m dali_launch.launcher.cli train --data-dir /tmp/fmnist --epochs 1 \
  --model huge_mlp:huge_mlp --optimizer adamw --run-root /tmp/rr-huge > $OUT/huge.out 2> $OUT/huge.err; echo "rc=$?"
cat $OUT/huge.err
true
