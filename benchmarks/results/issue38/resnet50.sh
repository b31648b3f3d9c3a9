# Issue 38's ResNet-50 baseline on one H200: its step alone, DALI alone and `dali-launch train` with defaults.
source benchmarks/results/issue38/gpu-setup.sh
[ -d /tmp/synth ] || { time python3 -m dali_launch.launcher.cli data synth /tmp/synth --format folders --train 25600 --test 2560 --classes 100; }
cd benchmarks
timeout 400 python3 imagenet.py --data /tmp/synth --classes 100 --gpus 1 --epochs 3 --calls 20 --parts step,data,train --out $OUT/resnet50.json
true
