"""One class names every file of a run directory; the launcher and every task use it alike."""
from __future__ import annotations

from pathlib import Path


class RunPaths:
    """A run directory: written once by the launcher, then appended to by the tasks.

    config.json       the resolved TaskSpec (what every task reads)
    config.toml       the resolved flags and --config file, as a --config file that repeats the run
    launch.json       the launcher's own settings (nodes, SLURM knobs, job id)
    manifest.json     what ran: config, package versions, git revision, topology, SLURM facts, environment
    rank_map.json     host, process, local devices and DALI shard ids of every process
    metrics.jsonl     one JSON object per epoch, from process 0
    result.json       the final summary, from process 0
    logs/rank-N.log   each process's output (local mode; SLURM keeps its own through submitit)
    ranks/rank-N.json what each process reports of itself (merged into rank_map.json)
    samples/          --record-samples fingerprints, epoch-E-rank-N-from-CALL.npy
    checkpoints/      Orbax steps: train state, epoch tally, epoch and DALI reader positions
    heartbeats/       rank-N, touched every few seconds by each live process (the watchdog reads them)
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)

    config = property(lambda self: self.root / "config.json")
    config_toml = property(lambda self: self.root / "config.toml")
    launch = property(lambda self: self.root / "launch.json")
    manifest = property(lambda self: self.root / "manifest.json")
    rank_map = property(lambda self: self.root / "rank_map.json")
    metrics = property(lambda self: self.root / "metrics.jsonl")
    result = property(lambda self: self.root / "result.json")
    logs = property(lambda self: self.root / "logs")
    ranks = property(lambda self: self.root / "ranks")
    samples = property(lambda self: self.root / "samples")
    submitit = property(lambda self: self.root / "submitit")
    checkpoints = property(lambda self: self.root / "checkpoints")
    heartbeats = property(lambda self: self.root / "heartbeats")

    def log(self, rank: int) -> Path:
        return self.logs / f"rank-{rank}.log"

    def rank_report(self, rank: int) -> Path:
        return self.ranks / f"rank-{rank}.json"

    def heartbeat(self, rank: int) -> Path:
        return self.heartbeats / f"rank-{rank}"

    def sample_record(self, epoch: int, rank: int, first_call: int) -> Path:
        return self.samples / f"epoch-{epoch}-rank-{rank}-from-{first_call}.npy"

    def sample_records(self, epoch: int) -> list[Path]:
        """Every rank's records of one epoch (a resumed epoch has several pieces per rank)."""
        return sorted(self.samples.glob(f"epoch-{epoch}-rank-*.npy"))


def write_atomic(path: Path, text: str) -> None:
    """Readers (the launcher's follow loop, other ranks) never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
