# On the GPU machine, from the repository root, after .devpkgs/install-dali.sh final: the wheels DALI's parts
# lack, this tree importable as dali_launch, Fashion-MNIST (its idx files, carried in .devpkgs/fm-*) as LMDBs.
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --target /tmp/site /tmp/stage/wheels/*.whl
mkdir -p /tmp/dl/dali_launch && ln -sfn "$PWD/launcher" /tmp/dl/dali_launch/launcher && ln -sfn "$PWD/trainer" /tmp/dl/dali_launch/trainer
touch /tmp/dl/dali_launch/__init__.py
export PYTHONPATH=/tmp/dl:/tmp/site PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
if [ ! -d /tmp/fmnist/training ]; then
  mkdir -p /tmp/fm-idx && cp /tmp/stage/fm/t10k-* /tmp/stage/fm/train-labels* /tmp/fm-idx/
  cat /tmp/stage/fm/train-images.part* > /tmp/fm-idx/train-images-idx3-ubyte.gz
  python3 -m dali_launch.launcher.cli data prepare --from /tmp/fm-idx --to /tmp/fmnist
fi
nproc; nvidia-smi -L
