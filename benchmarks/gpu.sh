#!/bin/bash
# Every GPU question of the project, in priority order; the first two (tutorial tasks) fit one call
# of at most ten minutes on a fresh one-GPU machine, the next three (startup media video) another. Each question writes OUT/NAME.json
# as soon as it ends (a call cut short keeps what it measured): the benchmark's own output, with the command,
# commit, date and machine around it.
#
#   tutorial   a user's own GPU pipelines (dali_tutorial_gpu.py: DALI's multi-GPU JAX tutorial function, unchanged,
#              and a @pipeline_def one with GPU operators after nvJPEG), each in `train`, as a --local task and
#              through the Python API: test accuracy against the built-in pipeline's with the same flags (tutorial.py)
#   tasks      each built-in task of images (segmentation, detection, contrastive) through `dali-launch train`
#              against its step alone and its input alone: ratio, data wait, the time between epochs (tasks.py)
#   startup    launch -> first step, cold and warm, phase by phase (startup.py)
#   media      the video and audio tasks the same way: clips decoded by NVDEC, sounds on the CPU and their log-mel
#              spectrograms on the GPU (tasks.py --tasks video,audio)
#   video      DALI's video reader decoding VP9 clips with NVDEC against the CPU's FFmpeg (video_decode.py)
#   mnist      the MNIST MLP with no flags against NVIDIA's example code, Fashion-MNIST (against.py)
#   resnet50   ResNet-50 bf16 with no speed flag against its step alone, ImageNet-class JPEGs (imagenet.py)
#   mesh       ViT-B/16's step with the fsdp layout against the replicated step (mesh_step.py), and a
#              model twice the GPU's memory refused in one line (huge_mlp.py)
#   remat      the largest-ViT ladder from ViT-g/14 up with --remat blocks (mesh_step.py --remat)
#   offload    ViT-H/14 with AdamW's moments in host memory (mesh_step.py --offload)
#
# Here, once:  bash benchmarks/gpu.sh pack        (.devpkgs/gpu-*: wheels the GPU image lacks, Fashion-MNIST)
# There, with DALI's four 50 MB parts (../shared/device/README.md, PART_MB=50), five calls back to back, each
# under 64 MiB with the tree: part 00 with .devpkgs/gpu-a; parts 01 and 02 alone; gpu-d (PyAV) alone; part 03
# with gpu-b and gpu-c:
#   bash .devpkgs/install-dali.sh && bash benchmarks/gpu.sh stage          (calls 1-3; gpu-d's: stage alone)
#   bash .devpkgs/install-dali.sh final && COMMIT=$(git rev-parse HEAD) bash benchmarks/gpu.sh stage all
# What comes back goes into benchmarks/results/BENCHMARK/h200.json (benchmarks/results/README.md), replacing
# the entry it measures again: mnist -> against/ (entry "defaults"), resnet50 -> imagenet/, mesh, remat and
# offload -> mesh_step/, tasks and media -> tasks/, video -> video_decode/, tutorial -> tutorial/, startup -> startup/.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
OUT=${OUT:-/tmp/gpu-out}
QUESTIONS=(tutorial tasks startup media video mnist resnet50 mesh remat offload)

pack() {  # on this machine: what the GPU image lacks, in folders small enough to ride beside DALI's parts
  local fm=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
  mkdir -p "$root/.devpkgs/gpu-a" "$root/.devpkgs/gpu-b" "$root/.devpkgs/gpu-c"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$root/.devpkgs/gpu-a" tensorboardX google-crc32c
  cp "$fm"/t10k-* "$fm"/train-labels* "$root/.devpkgs/gpu-a/"
  split -b 14M -d -a 1 "$fm/train-images-idx3-ubyte.gz" "$root/.devpkgs/gpu-b/train-images.part"
  mv "$root/.devpkgs/gpu-b/train-images.part1" "$root/.devpkgs/gpu-c/"
  mkdir -p "$root/.devpkgs/gpu-d"  # PyAV (35 MB, FFmpeg inside): the video questions' clips; a call of its own
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$root/.devpkgs/gpu-d" av
  du -sh "$root"/.devpkgs/gpu-*
}

stage() {  # there: keep what this call carried; once everything came, install it and make the data sets
  mkdir -p /tmp/stage
  for d in "$root"/.devpkgs/gpu-*; do [ -d "$d" ] && cp "$d"/* /tmp/stage/; done
  ls /tmp/stage
}

environment() {  # there: this tree importable as dali_launch, the wheels, Fashion-MNIST as Caffe2 LMDBs
  export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
  python3 -m pip install -q --no-index --no-deps --target /tmp/site /tmp/stage/*.whl || return 1
  mkdir -p /tmp/dl/dali_launch && ln -sfn "$root"/dali_launch/*.py /tmp/dl/dali_launch/  # the public face
  ln -sfn "$root/launcher" /tmp/dl/dali_launch/launcher && ln -sfn "$root/trainer" /tmp/dl/dali_launch/trainer
  export PYTHONPATH=/tmp/dl:/tmp/site:$here
  if [ ! -d /tmp/fmnist/training ]; then
    mkdir -p /tmp/fm-idx && cp /tmp/stage/t10k-* /tmp/stage/train-labels* /tmp/fm-idx/
    cat /tmp/stage/train-images.part* > /tmp/fm-idx/train-images-idx3-ubyte.gz
    python3 -m dali_launch.launcher.cli data prepare --from /tmp/fm-idx --to /tmp/fmnist | tail -1
  fi
  nvidia-smi -L
}

record() {  # NAME TIMEOUT_S COMMAND...: runs it, then OUT/NAME.json holds its JSON (OUT/NAME.raw.json) wrapped
  local name=$1 limit=$2
  shift 2
  local began=$SECONDS
  echo "== $name: $*"
  timeout "$limit" "$@" 2>&1 | grep -v "^[WI]0000" | tail -25 | tee "/tmp/$name.log"
  local rc=${PIPESTATUS[0]}
  python3 - "$name" "$rc" "$((SECONDS - began))" "$*" <<'EOF'
import json, os, subprocess, sys, time
from pathlib import Path
name, rc, wall, command = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
out = Path(os.environ["OUT"])
raw = out / f"{name}.raw.json"
gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip()
doc = {
    "name": name, "command": command, "commit": os.environ.get("COMMIT", "unknown"),
    "date": time.strftime("%Y-%m-%d", time.gmtime()), "time_utc": time.strftime("%H:%M", time.gmtime()),
    "machine": gpu, "rc": rc, "wall_s": wall,
    "result": json.loads(raw.read_text()) if raw.exists() else None,
    "log_tail": Path(f"/tmp/{name}.log").read_text().splitlines()[-25:],
}
(out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
raw.unlink(missing_ok=True)
EOF
}

refusal() {  # a model twice the GPU's memory: the one line, its exit status and how long it took
  local began=$SECONDS
  python3 -m dali_launch.launcher.cli train --data-dir /tmp/fmnist --epochs 1 --model huge_mlp:huge_mlp \
    --optimizer adamw --run-root /tmp/rr-huge >/dev/null 2>/tmp/huge.err
  local rc=$?
  python3 -c "import json,sys; print(json.dumps({'rc': $rc, 'seconds': $((SECONDS - began)), \
'stderr': open('/tmp/huge.err').read().strip().splitlines()[-3:]}))" > "$OUT/refusal.raw.json"
  cat /tmp/huge.err
}

mesh() {
  python3 "$here/mesh_step.py" --parts fsdp-cost --out "$OUT/mesh.raw.json" || return 1
  refusal
  python3 - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
doc = {"fsdp_cost": json.loads((out / "mesh.raw.json").read_text())}
doc["too_large"] = json.loads((out / "refusal.raw.json").read_text())
(out / "refusal.raw.json").unlink()
(out / "mesh.raw.json").write_text(json.dumps(doc))
EOF
}

ask() {
  case "$1" in
    mnist) record mnist 150 python3 "$here/against.py" --data /tmp/fmnist --epochs 4 --passes 2 --example \
      --out "$OUT/mnist.raw.json" ;;
    resnet50)
      [ -d /tmp/synth/training ] || timeout 120 python3 -m dali_launch.launcher.cli data synth /tmp/synth \
        --format folders --train 25600 --test 2560 --classes 100 | tail -1
      record resnet50 200 python3 "$here/imagenet.py" --data /tmp/synth --classes 100 --gpus 1 --parts step,train \
        --epochs 3 --out "$OUT/resnet50.raw.json" ;;
    mesh) record mesh 150 bash "$here/gpu.sh" _mesh ;;
    tasks) record tasks 270 python3 "$here/tasks.py" --tasks segmentation,detection,contrastive \
      --out "$OUT/tasks.raw.json" ;;
    media) record media 240 python3 "$here/tasks.py" --tasks video,audio --out "$OUT/media.raw.json" ;;
    video) record video 120 python3 "$here/video_decode.py" --out "$OUT/video.raw.json" ;;
    tutorial) record tutorial 300 python3 "$here/tutorial.py" --data /tmp/fmnist --out "$OUT/tutorial.raw.json" ;;
    startup) record startup 90 python3 "$here/startup.py" --data /tmp/fmnist --epochs 1 --runs 3 \
      --out "$OUT/startup.raw.json" ;;
    remat) record remat 330 python3 "$here/mesh_step.py" --parts largest --remat --rungs vit-g14,vit-G14,vit-e14 \
      --keep-going --part-timeout 150 --out "$OUT/remat.raw.json" ;;
    offload) record offload 100 python3 "$here/mesh_step.py" --parts largest --offload --rungs vit-h14 \
      --part-timeout 95 --out "$OUT/offload.raw.json" ;;
    *) echo "gpu.sh: no question '$1' (ask: ${QUESTIONS[*]}, all, pack, stage)" >&2; exit 2 ;;
  esac
}

main() {
  [ $# -gt 0 ] || set -- all
  case "$1" in
    pack) pack; return ;;
    _mesh) mesh; return ;;
    stage) stage; shift; [ $# -gt 0 ] || return 0 ;;
  esac
  [ "$1" = all ] && set -- "${QUESTIONS[@]}"
  for q in "$@"; do case " ${QUESTIONS[*]} " in *" $q "*) ;; *) ask "$q" ;; esac; done  # refuses before any work
  mkdir -p "$OUT"
  environment || { echo "gpu.sh: the environment could not be made" >&2; exit 1; }
  for q in "$@"; do ask "$q"; done
  ls -la "$OUT"
}

export OUT
main "$@"
