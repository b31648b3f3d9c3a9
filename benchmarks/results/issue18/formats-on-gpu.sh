# GPU machine, after bench18.sh: the other formats and the global order, end to end (2 epochs of 25k).
export PYTHONPATH=/tmp/dl:/tmp/site PYTHONUNBUFFERED=1
dl() { python3 -m dali_launch.launcher.cli "$@"; }
for f in tfrecord webdataset; do [ -d /tmp/synth-$f ] || dl data synth /tmp/synth-$f --format $f --train 25000 --test 2500 --classes 100 | tail -1; done
common="--num-classes 100 --model resnet50 --precision bf16 --batch-size 256 --image-size 224 --epochs 3 --platform gpu"
run() { name=$1; shift; rm -rf /tmp/v; dl train $common --run-root /tmp/v "$@" > $OUT/$name.log 2>&1; echo "== $name rc=$? $*"; grep -E "^epoch [0-9]" $OUT/$name.log; }
run tfrecord --pipeline tfrecord --data-dir /tmp/synth-tfrecord
run webdataset --pipeline webdataset --data-dir /tmp/synth-webdataset
run folders-global --pipeline folders --data-dir /tmp/synth --sample-order global
