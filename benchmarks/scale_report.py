"""benchmarks/scale.py's report: the table of its rows, what each column means, and the plot."""

from __future__ import annotations

from pathlib import Path

MODES = ("local", "slurm")  # the order the table and the plot show them


def cell(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


COLUMNS = (  # header, key, format, width
    ("N", "processes", "d", 3),
    ("mode", "mode", "s", 6),
    ("nodes", "layout", "s", 6),
    ("first step s", "first_step_s", ".1f", 12),
    ("step ms", "step_ms", ".1f", 8),
    ("step ops/rank", "step_ops_rank", ".3f", 13),
    ("watchdog ops/rank/s", "watchdog_ops_rank_s", ".2f", 19),
    ("start ops r0", "startup_ops_rank0", "d", 12),
    ("start ops/rank", "startup_ops_rank", "d", 14),
    ("ckpt ops/rank", "save_ops_rank", ".0f", 13),
    ("ckpt s", "save_s", ".2f", 7),
    ("eval N s", "eval_n_cached_s", ".2f", 8),
    ("eval 1 s", "eval_1_cached_s", ".2f", 8),
    ("kill->gone s", "ranks_gone_s", ".2f", 12),
    ("named", "named_first", "", 5),
    ("PSS GB", "pss_gb", ".1f", 6),
)


def table(rows: list[dict]) -> str:
    lines = ["  ".join(f"{h:>{w}}" for h, _, _, w in COLUMNS)]
    lines.append("-" * len(lines[0]))
    for r in rows:
        if r.get("failed"):
            what = "skipped" if r.get("skipped") else "FAILED"
            last = (r.get("stderr_tail") or [""])[-1][:80]
            lines.append(f"{r['processes']:>3}  {r['mode']:>6}  {what}: {r['error']} {last}")
            continue
        values = {**r, "layout": f"{r['nodes']}x{r['tasks_per_node']}", "pss_gb": (r.get("pss_mb_ranks") or 0) / 1024}
        values["named_first"] = {True: "yes", False: "NO"}.get(r.get("named_first"))
        lines.append("  ".join(f"{cell(values.get(k), f):>{w}}" for _, k, f, w in COLUMNS))
    return "\n".join(lines)


FOOTER = """first step s: CLI start -> rank 0's first SGD step done (submission, scheduling, start-up, compiling)
step ms: rank 0's steady step, --global-batch-size over all N devices (strong scaling on 2 cores)
file-system operations (Python audit hooks + os.stat/os.lstat, under the run root and the data), per rank,
the busiest rank's; the watchdog's periodic ones (its heartbeat, one peer's, the job's cause) apart, as a rate:
  step ops/rank: per SGD step while training, besides the watchdog's
  watchdog ops/rank/s: the watchdog's over the rank's life (3 per 2 s interval)
  start ops r0, start ops/rank: before the first step, besides the watchdog's: rank 0, the busiest other
  ckpt ops/rank: per epoch-end checkpoint, besides the watchdog's (rank 0 writes it)
ckpt s: the slowest rank's save, mean over the epoch-end checkpoints
eval N s, eval 1 s: a cached evaluation on every process (--eval-on all) and on process 0 alone
kill->gone s: SIGKILL of the last rank -> every rank gone; named: the launcher's first rank named is it
PSS GB: the ranks' memory together (proportional set size: shared libraries counted once), before the kill"""


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (  # title, (key, label) of each line
        ("launch -> first step, s", (("first_step_s", ""),)),
        ("steady step, ms", (("step_ms", ""),)),
        ("fs ops per rank per step (besides the watchdog)", (("step_ops_rank", ""),)),
        ("watchdog fs ops per rank per s", (("watchdog_ops_rank_s", ""),)),
        ("start-up fs ops per rank (busiest non-0)", (("startup_ops_rank", ""),)),
        ("checkpoint save, s", (("save_s", ""),)),
        ("cached evaluation, s", (("eval_n_cached_s", " N processes"), ("eval_1_cached_s", " process 0"))),
        ("SIGKILL -> all ranks gone, s", (("ranks_gone_s", ""),)),
    )
    fig, axes = plt.subplots(2, 4, figsize=(17, 7))
    for ax, (title, lines) in zip(axes.flat, panels):
        for mode in MODES:
            for key, label in lines:
                points = [(r["processes"], r.get(key)) for r in rows if r["mode"] == mode and r.get(key) is not None]
                if points:
                    ax.plot(*zip(*points), marker="o", label=mode + label)
        ax.set_xscale("log", base=2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("processes N")
        ax.legend(fontsize=8)
    fig.suptitle("dali-launch at N processes (MLP, CPU devices, 2-core machine): benchmarks/scale.py")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
