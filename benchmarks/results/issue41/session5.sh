# Issue 41 on one H200, step only (benchmarks/mesh_step.py; OUT: where the files go). No DALI: the tree
# importable as dali_launch (as issue38/gpu-setup.sh, less its wheels and data). Run as
#   bash benchmarks/results/issue41/session5.sh --parts fsdp-cost,largest --rungs vit-l16,vit-l14,vit-h16 --keep-going
#   bash benchmarks/results/issue41/session5.sh --parts largest --rungs vit-h14,vit-g14,vit-G14,vit-e14 --keep-going
# each within one 600-s command; the second adds its rungs to the first's mesh_step.json (carried here).
mkdir -p /tmp/dl/dali_launch && ln -sfn "$PWD/launcher" /tmp/dl/dali_launch/launcher && ln -sfn "$PWD/trainer" /tmp/dl/dali_launch/trainer
touch /tmp/dl/dali_launch/__init__.py
export PYTHONPATH=/tmp/dl PYTHONUNBUFFERED=1 JAX_COMPILATION_CACHE_DIR=/tmp/jax-cache
nproc; nvidia-smi -L
[ -f benchmarks/results/issue41/mesh_step.json ] && cp benchmarks/results/issue41/mesh_step.json "$OUT/"
timeout 580 python3 benchmarks/mesh_step.py "$@" --out "$OUT/mesh_step.json"
