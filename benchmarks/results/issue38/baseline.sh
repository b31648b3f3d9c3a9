# Issue 38's first GPU session (one H200): the MNIST MLP with no flags against older code and the example,
# each contender's first pass under py-spy; then launch -> first step. OUT: where the files go.
source benchmarks/results/issue38/gpu-setup.sh
cd benchmarks
timeout 330 python3 against.py --data /tmp/fmnist --epochs 5 --passes 2 --example --py-spy head,off \
  --variant off="--decoded-cache off" --code f9d8d52=../.devpkgs/code/f9d8d52 --code cfd1908=../.devpkgs/code/cfd1908 \
  --out $OUT/against.json
timeout 120 python3 startup.py --data /tmp/fmnist --out $OUT/startup.json
true
