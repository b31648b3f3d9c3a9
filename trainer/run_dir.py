"""One class names every file of a run directory; the launcher and every task use it alike."""
from __future__ import annotations

from pathlib import Path


class RunPaths:
    """A run directory: written once by the launcher, then appended to by the tasks.

    config.json       the resolved TaskSpec (what every task reads)
    launch.json       the launcher's own settings (nodes, SLURM knobs, job id)
    rank_map.json     host, process, local devices and DALI shard ids of every process
    metrics.jsonl     one JSON object per epoch, from process 0
    result.json       the final summary, from process 0
    logs/rank-N.log   each process's output (local mode; SLURM keeps its own through submitit)
    ranks/rank-N.json what each process reports of itself (merged into rank_map.json)
    samples/          --record-samples fingerprints, epoch-E-rank-N.npy
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)

    config = property(lambda self: self.root / "config.json")
    launch = property(lambda self: self.root / "launch.json")
    rank_map = property(lambda self: self.root / "rank_map.json")
    metrics = property(lambda self: self.root / "metrics.jsonl")
    result = property(lambda self: self.root / "result.json")
    logs = property(lambda self: self.root / "logs")
    ranks = property(lambda self: self.root / "ranks")
    samples = property(lambda self: self.root / "samples")
    submitit = property(lambda self: self.root / "submitit")

    def log(self, rank: int) -> Path:
        return self.logs / f"rank-{rank}.log"

    def rank_report(self, rank: int) -> Path:
        return self.ranks / f"rank-{rank}.json"

    def sample_record(self, epoch: int, rank: int) -> Path:
        return self.samples / f"epoch-{epoch}-rank-{rank}.npy"


def write_atomic(path: Path, text: str) -> None:
    """Readers (the launcher's follow loop, other ranks) never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
