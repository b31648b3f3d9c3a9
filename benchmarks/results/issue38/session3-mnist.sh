# Issue 38's third GPU session (one H200), on the code as it lands: the MNIST MLP with no flags (the
# checkpoint-async auto rule resolving to the foreground, autotuning picks kept in the run root) against
# f9d8d52, 0b2a668 and the example, with background checkpoints as a variant; launch -> first step, cold and
# warm; then the ResNet-50 data set for session3-det.sh. OUT: where the files go (kept here as
# session3-against-gpu.json and session3-startup-gpu.json).
source benchmarks/results/issue38/gpu-setup.sh
cd benchmarks
timeout 300 python3 against.py --data /tmp/fmnist --epochs 5 --passes 2 --example \
  --variant async="--checkpoint-async on" \
  --code 0b2a668=../.devpkgs/code/0b2a668 --code f9d8d52=../.devpkgs/code/f9d8d52 --out $OUT/against.json
timeout 100 python3 startup.py --data /tmp/fmnist --epochs 2 --out $OUT/startup.json
[ -d /tmp/synth/training ] || { time timeout 150 python3 -m dali_launch.launcher.cli data synth /tmp/synth --format folders --train 25600 --test 2560 --classes 100; }
true
