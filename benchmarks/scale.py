#!/usr/bin/env python3
"""What grows with the number of ranks N. The MLP on CPU devices, 1 process per device, N = 1 ... 32,
in local mode and on the local SLURM cluster (several slurmd on this host, several tasks each).

Per mode and N, two runs through the CLI, each with benchmarks/fs_probe on PYTHONPATH (Python's audit
hooks and wrapped os.stat/os.lstat count every process's file-system operations under the run root
and the data; fs_probe/sitecustomize.py says what it sees and what not):

  steady  --epochs E (default 3), --eval-on all: launch -> first step (rank 0's first step, from the
          moment the CLI started); steady step time (rank 0, after its first step); file-system operations
          per rank per step and per second while the ranks train (the most of any rank, and rank 0's), at
          start-up and per checkpoint; a checkpoint's save time (the slowest rank's); evaluation time
          on N processes (the first, which builds the pipelines, and a later, cached one);
  kill    --eval-on process-0, killed with SIGKILL (the last rank) once two epochs are evaluated:
          evaluation on 1 process (first and cached), and the time until every rank is gone and the
          launcher has ended, and whether the launcher named the killed rank first.

    dali-launch data prepare --from "$(python -c 'from dali_launch.launcher.data import datasets; \
        print(datasets.EMBEDDED_IDX)')" --to /tmp/mnist
    bash slurm/cluster.sh up --nodes 4 --cpus-per-node 8 --dir /tmp/slurm-scale
    python benchmarks/scale.py --data /tmp/mnist --processes 1,2,4,8,16,32 --modes local,slurm \
        --slurm-dir /tmp/slurm-scale --out benchmarks/results/scale/cpu-2core.json --plot benchmarks/results/scale/cpu-2core.png

A run that fails or times out is recorded with its last stderr lines and the sweep goes on; exit 1 then.
On a 2-core machine every number past N = 2 is dominated by N processes sharing 2 cores: read the file
operation counts as the result, the times as upper bounds (docs/scale.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import listed  # the same folder: run as a script
from scale_probe import analyse, pss_mb
from scale_report import FOOTER, MODES, plot, table

PROBE = Path(__file__).resolve().parent / "fs_probe"
TAIL_LINES = 20
KILL_WAIT_S = 120  # after SIGKILL: past this the run is recorded as not stopping
POLL_S = 0.05
RANK_MB = 550  # a rank's memory (PSS) before any is measured: JAX, XLA and DALI, 440-530 MB at N = 2


def slurm_env(folder: Path | None) -> dict:
    if folder is None:
        return {}
    return {"SLURM_CONF": str(folder / "slurm.conf"), "PATH": f"{folder / 'bin'}:{os.environ['PATH']}"}


def slurm_nodes(env: dict) -> list[int]:
    """The CPUs of each node of the cluster SLURM_CONF names."""
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %c"], env={**os.environ, **env}, capture_output=True, text=True, timeout=30
    )
    nodes = dict(line.split() for line in out.stdout.splitlines() if line.strip())
    return [int(cpus) for cpus in nodes.values()]


def layout(mode: str, n: int, nodes: list[int]) -> tuple[int, int] | None:
    """(nodes, tasks per node) for N processes: local mode one host; SLURM as many nodes as divide N
    (several tasks each once N exceeds them), each holding its tasks on its CPUs (one each); None when
    the cluster cannot."""
    if mode == "local":
        return 1, n
    for count in range(len(nodes), 0, -1):
        if n % count == 0 and n // count <= min(sorted(nodes, reverse=True)[:count]):
            return count, n // count
    return None


def cli_args(args, mode: str, where: tuple[int, int], root: Path, kind: str) -> list[str]:
    nodes, tasks = where
    place = ["--local", "--local-timeout-s", str(args.timeout_s)] if mode == "local" else ["--time-min", "60"]
    epochs = args.epochs if kind == "steady" else 50  # a killed run ends long before
    return [
        *place,
        *(["--nodes", str(nodes)] if mode == "slurm" else []),
        "--tasks-per-node",
        str(tasks),
        "--gpus-per-node",
        str(tasks),
        "--platform",
        "cpu",
        "--data-dir",
        str(args.data.absolute()),
        "--epochs",
        str(epochs),
        "--global-batch-size",
        str(args.global_batch_size),
        "--eval-on",
        "all" if kind == "steady" else "process-0",
        "--checkpoint-every-min",
        "0",  # checkpoints at epoch ends only: the steady windows hold none
        "--init-timeout-s",
        str(args.timeout_s),
        "--run-root",
        str(root),
        "--name",
        f"{mode}-{tasks * nodes}-{kind}",
    ]


def start(args, mode: str, n: int, where, work: Path, kind: str) -> tuple[subprocess.Popen, Path, Path, float]:
    """The CLI in the background with the probe on: (process, run root, probe folder, launch time)."""
    name = f"{mode}-{n}-{kind}"
    root, probe = work / name / "runs", work / name / "probe"
    probe.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        **slurm_env(args.slurm_dir if mode == "slurm" else None),
        "PYTHONPATH": os.pathsep.join([str(PROBE), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "DALI_LAUNCH_FS_PROBE": str(probe),
        "DALI_LAUNCH_FS_PROBE_ROOTS": os.pathsep.join([str(root), str(args.data.absolute())]),
        "MALLOC_ARENA_MAX": "2",  # glibc's arenas per thread: ~15 % of a rank's memory (measured), 32 ranks fit in less
    }
    command = [sys.executable, "-m", "dali_launch.launcher.cli", *cli_args(args, mode, where, root, kind)]
    print(f"{name}: dali-launch {' '.join(command[3:])}", flush=True)
    launched = time.time()
    proc = subprocess.Popen(
        command, env=env, text=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    return proc, root, probe, launched


def run_dir(root: Path) -> Path | None:
    """The run root's one run directory; never its shared compile cache (.compile-cache), a folder beside it."""
    runs = [p for p in root.glob("*") if (p / "config.json").is_file()] if root.is_dir() else []
    return runs[0] if runs else None


def epochs_of(folder: Path | None) -> list[dict]:
    path = folder / "metrics.jsonl" if folder else None
    return [json.loads(line) for line in path.read_text().splitlines()] if path and path.exists() else []


def steady(args, mode: str, n: int, where, work: Path) -> dict:
    proc, root, probe, launched = start(args, mode, n, where, work, "steady")
    try:
        _, err = proc.communicate(timeout=args.timeout_s + 120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return {"failed": True, "error": f"timed out after {args.timeout_s} s", "stderr_tail": tail(err)}
    folder = run_dir(root)
    if proc.returncode != 0 or folder is None:
        return {"failed": True, "error": f"exit {proc.returncode}", "stderr_tail": tail(err)}
    epochs = epochs_of(folder)
    found = analyse(probe, folder, launched, n)
    found.update(
        launched_at=launched,
        eval_n_first_s=epochs[0]["eval_time_s"],
        eval_n_cached_s=epochs[-1]["eval_time_s"],
        eval_devices=epochs[-1]["eval_devices"],
        test_accuracy=epochs[-1]["test_accuracy"],
        run_dir=str(folder),
    )
    return found


def killed(args, mode: str, n: int, where, work: Path) -> dict:
    """Two epochs evaluated on process 0 alone, then SIGKILL to the last rank: who is named, how fast all end."""
    proc, root, _, _ = start(args, mode, n, where, work, "kill")
    pids = []
    try:
        end = time.monotonic() + args.timeout_s
        while len(epochs_of(run_dir(root))) < 2 and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.5)
        folder = run_dir(root)
        epochs = epochs_of(folder)
        if len(epochs) < 2:
            return {"kill_failed": f"no two evaluated epochs ({proc.poll()=})", "stderr_tail": tail(_drain(proc))}
        pids = [json.loads((folder / "ranks" / f"rank-{r}.json").read_text())["pid"] for r in range(n)]
        found = {"pss_mb_ranks": round(sum(pss_mb(pid) for pid in pids)), "killed_rank": n - 1}
        os.kill(pids[-1], signal.SIGKILL)
        return {**found, **_stopping(proc, pids, n - 1), **_evals(epochs)}
    finally:
        for pid in [p for p in pids if alive(p)]:
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def _stopping(proc: subprocess.Popen, pids: list[int], victim: int) -> dict:
    hit, gone_s = time.monotonic(), None
    while time.monotonic() - hit < KILL_WAIT_S:
        if gone_s is None and not any(alive(pid) for pid in pids):
            gone_s = time.monotonic() - hit
        if gone_s is not None and proc.poll() is not None:
            break
        time.sleep(POLL_S)
    ended_s = time.monotonic() - hit if proc.poll() is not None else None
    err = _drain(proc)
    named = next((int(m.group(1)) for m in map(RANK.search, err.splitlines()) if m), None)
    return {
        "ranks_gone_s": gone_s,
        "launcher_done_s": ended_s,
        "named_first": named == victim,
        "kill_stderr_head": err.splitlines()[:TAIL_LINES],  # the first lines: what the launcher names first
    }


RANK = re.compile(r"\brank (\d+)\b")


def _evals(epochs: list[dict]) -> dict:
    return {"eval_1_first_s": epochs[0]["eval_time_s"], "eval_1_cached_s": epochs[1]["eval_time_s"]}


def _drain(proc: subprocess.Popen) -> str:
    try:
        return proc.communicate(timeout=30)[1] or ""
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1] or ""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def tail(text: str | None) -> list[str]:
    return (text or "").strip().splitlines()[-TAIL_LINES:]


def measure(args, mode: str, n: int, nodes: list[int], work: Path, per_rank_mb: float) -> dict:
    where = layout(mode, n, nodes)
    row = {"mode": mode, "processes": n}
    if where is None:
        return {**row, "failed": True, "error": f"the cluster's nodes ({nodes} CPUs) cannot hold {n} tasks"}
    short = memory_short(n, per_rank_mb, args.memory_margin_gb)
    if short:
        print(f"{mode}-{n}: skipped, {short}", flush=True)
        return {**row, "failed": True, "skipped": True, "error": short}
    row.update(nodes=where[0], tasks_per_node=where[1])
    row.update(steady(args, mode, n, where, work))
    if not args.no_kill:
        row.update(killed(args, mode, n, where, work))
    print("  " + json.dumps({k: v for k, v in row.items() if not isinstance(v, (list, dict))}), flush=True)
    return row


def available_mb() -> float:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) / 1024


def memory_short(n: int, per_rank_mb: float, margin_gb: float) -> str | None:
    """Why N ranks would not fit in this machine's free memory (shared with others), or None."""
    need, free = n * per_rank_mb, available_mb()
    if need <= free - margin_gb * 1024:
        return None
    return (
        f"memory: {n} ranks need ~{need / 1024:.1f} GB ({per_rank_mb:.0f} MB each, measured), "
        f"{free / 1024:.1f} GB are available and --memory-margin-gb {margin_gb:g} is kept for others"
    )


def per_rank_estimate(rows: list[dict]) -> float:
    """Memory per rank, MB: that of the largest N measured so far (PSS, which shares the libraries' pages
    among more ranks as N grows: 550 MB at N = 1, 380 at N = 8), with 10 % to spare; else RANK_MB."""
    seen = sorted((r["processes"], r["pss_mb_ranks"] / r["processes"]) for r in rows if r.get("pss_mb_ranks"))
    return 1.1 * seen[-1][1] if seen else RANK_MB


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="Folder with training/ and testing/ Caffe2 LMDBs.")
    parser.add_argument("--processes", type=listed(int), default="1,2,4,8,16,32", help="N values (default 1..32).")
    parser.add_argument("--modes", type=listed(choices=MODES), default="local,slurm", help="local, slurm or both.")
    parser.add_argument("--slurm-dir", type=Path, help="A cluster.sh cluster's folder (slurm mode).")
    parser.add_argument("--epochs", type=int, default=3, help="Epochs of the steady run (default 3; at least 2).")
    parser.add_argument(
        "--global-batch-size",
        type=int,
        default=256,
        help="Samples per step over all devices (default 256: 32 steps an epoch of 8,000, 8 per device at N=32).",
    )
    parser.add_argument("--timeout-s", type=int, default=1200, help="Seconds one run may take (default 1200).")
    parser.add_argument("--no-kill", action="store_true", help="Skip the kill runs.")
    parser.add_argument(
        "--memory-margin-gb",
        type=float,
        default=4.0,
        help="Skip an N whose ranks would leave less than this much memory free (default 4: a shared machine).",
    )
    parser.add_argument("--work-dir", type=Path, help="Where runs and probe files go (default: a new temp dir).")
    parser.add_argument("--out", type=Path, help="Write the table and every row as JSON.")
    parser.add_argument(
        "--add-to",
        type=Path,
        help="An earlier --out: its rows are kept, those of the (mode, N) measured again replaced.",
    )
    parser.add_argument(
        "--reanalyse",
        action="store_true",
        help="With --add-to: count its rows' file operations again from their probes.",
    )
    parser.add_argument("--plot", type=Path, help="Write the figure (PNG).")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the kill run's process-0 evaluation is timed on its second")
    uneven = [n for n in args.processes if args.global_batch_size % n]
    if uneven:
        parser.error(f"--global-batch-size {args.global_batch_size} does not divide by {uneven} processes")
    if "slurm" in args.modes and not (args.slurm_dir and (args.slurm_dir / "slurm.conf").is_file()):
        parser.error("--modes slurm needs --slurm-dir of a running cluster (bash slurm/cluster.sh up --dir DIR)")
    if not (args.data / "training" / "data.mdb").is_file():
        parser.error(f"no training LMDB in {args.data}; make it with `dali-launch data prepare --to {args.data}`")
    return args


def reanalysed(row: dict) -> dict:
    """An earlier row with its file-system counts read again from its probe files (scale_probe.py as it is
    now); its times, its kill and its first step (without a recorded launch time) kept."""
    if not row.get("run_dir"):
        return row
    folder = Path(row["run_dir"])
    found = analyse(folder.parents[1] / "probe", folder, row.get("launched_at"), row["processes"])
    return {**row, **{k: v for k, v in found.items() if v is not None}}


def merged(earlier: list[dict], rows: list[dict]) -> list[dict]:
    """An earlier sweep's rows (--add-to) with this one's: a (mode, N) measured again replaces its row."""
    new = {(r["mode"], r["processes"]): r for r in rows}
    kept = [r for r in earlier if (r["mode"], r["processes"]) not in new]
    return sorted([*kept, *rows], key=lambda r: (MODES.index(r["mode"]), r["processes"]))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="scale-"))).absolute()
    print(f"runs and probe files under {work}", flush=True)
    nodes = slurm_nodes(slurm_env(args.slurm_dir)) if "slurm" in args.modes else []
    earlier = json.loads(args.add_to.read_text())["rows"] if args.add_to else []
    if args.reanalyse:
        earlier = [reanalysed(row) for row in earlier]
    rows = []
    for mode in args.modes:
        for n in sorted(set(args.processes)):
            rows.append(measure(args, mode, n, nodes, work, per_rank_estimate(earlier + rows)))
    rows = merged(earlier, rows)
    text = table(rows)
    print("\n" + text + "\n" + FOOTER, flush=True)
    if args.out:
        doc = {"argv": sys.argv[1:] if argv is None else argv, "table": text, "footer": FOOTER, "rows": rows}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2))
        print(f"wrote {args.out}")
    if args.plot:
        plot(rows, args.plot)
        print(f"wrote {args.plot}")
    bad = [r for r in rows if (r.get("failed") and not r.get("skipped")) or r.get("kill_failed")]
    bad += [r for r in rows if r.get("named_first") is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
