# Issue 38's second GPU session (one H200), on the code as it lands: the MNIST MLP with no flags against the
# code this round started from (0b2a668), f9d8d52 (the fastest earlier version) and the example, with the host
# decoded cache and synchronous checkpoints as variants; then launch -> first step, cold and warm, two runs
# of one run root (their parameters compared). OUT: where the files go.
source benchmarks/results/issue38/gpu-setup.sh
cd benchmarks
timeout 420 python3 against.py --data /tmp/fmnist --epochs 5 --passes 2 --example \
  --variant host="--decoded-cache 1G" --variant sync="--checkpoint-async off" \
  --code 0b2a668=../.devpkgs/code/0b2a668 --code f9d8d52=../.devpkgs/code/f9d8d52 --out $OUT/against.json
timeout 120 python3 startup.py --data /tmp/fmnist --epochs 2 --out $OUT/startup.json
true
