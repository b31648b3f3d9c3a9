"""`dali-launch runs ROOT --prune`: run directories deleted to free space; a dry run unless --yes.

Which runs: every selector given holds (--failed: its state is failed; --older-than: it last wrote that
long ago; --keep N: it is not among ROOT's N newest), plus each run named by --run. Never deleted: a run
that is live (its launcher or process 0 holds its lock, or its SLURM job is queued: the job handle's
state, as for `status`), and, unless named by --run, a resumable one (interrupted, cancelled or failed
with a checkpoint to go on from: its newest checkpoint may be all that is left of its training). Sweep
folders are left alone (a point is deleted only when --run names it). A run is checked again, and its
launcher lock taken, just before it is deleted: a `--resume` of it cannot start meanwhile.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from dali_launch.trainer.errors import UsageError

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class Selectors:
    failed: bool = False
    older_than: str | None = None  # a duration: 30m, 12h, 7d, 2w
    keep: int | None = None  # ROOT's newest N runs are not pruned
    named: tuple[str, ...] = ()  # --run: these, whatever the selectors, resumable or not

    def check(self) -> float | None:
        """The age --older-than gives, in seconds; a UsageError where the selectors select nothing sure."""
        if not (self.failed or self.older_than or self.keep is not None or self.named):
            raise UsageError(
                "--prune needs a selector of the runs to delete: --failed, --older-than AGE (e.g. 7d), "
                "--keep N (all but the N newest), or --run NAME"
            )
        if self.keep is not None and self.keep < 0:
            raise UsageError(f"--keep {self.keep} must be 0 or more (the newest runs kept)")
        if self.older_than is None:
            return None
        age = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", self.older_than.strip())
        if not age:
            raise UsageError(f"--older-than {self.older_than} is not an age; write a number and s, m, h, d or w: 7d")
        return float(age.group(1)) * UNITS[age.group(2)]


@dataclass(frozen=True)
class Decision:
    paths: object  # RunPaths
    state: str
    size: int
    kept: str = ""  # why it stays; "" where it goes


def prune(root: Path, selectors: Selectors, yes: bool, say) -> None:
    """Says what goes (each run, its state and size) and what stays and why; deletes what goes with `yes`."""
    older_than = selectors.check()
    named = _named(root, selectors.named)
    runs = _top_level_runs(root)
    chosen = [p for p in runs if _selected(p, runs, selectors, older_than)]
    chosen += [p for p in named if p.root not in {c.root for c in chosen}]
    if not chosen:
        say(f"no run under {root.absolute()} matches; nothing to delete")
        return
    decisions = [_decide(p, p.root in {n.root for n in named}) for p in chosen]
    decisions.sort(key=lambda d: bool(d.kept))  # what goes, then what stays: each oldest first
    freed, count = 0, 0
    for d in decisions:
        if d.kept:
            say(f"kept {d.paths.root.name} ({d.kept})")
        elif not yes:
            say(f"would delete {d.paths.root.name} ({d.state}, {size_text(d.size)})")
            freed, count = freed + d.size, count + 1
        elif _delete(d.paths, say):
            say(f"deleted {d.paths.root.name} ({d.state}, {size_text(d.size)})")
            freed, count = freed + d.size, count + 1
    runs_text = f"{count} run{'' if count == 1 else 's'}"
    if yes:
        say(f"freed {size_text(freed)} in {runs_text}")
    else:
        say(f"would free {size_text(freed)} in {runs_text}; add --yes to delete {'it' if count == 1 else 'them'}")


def _named(root: Path, names: tuple[str, ...]) -> list:
    """--run's runs, found as `status` finds a run under ROOT; a live one is refused before anything goes."""
    from dali_launch.launcher.backends import registry

    found = []
    for name in names:
        try:
            paths = registry.find_run(name, str(root))
        except UsageError as e:
            raise UsageError(f"--run {name}: {e}") from None
        if root.absolute() not in paths.root.parents:
            raise UsageError(
                f"--run {name} is not a run under {root.absolute()}; name one `dali-launch runs` lists there"
            )
        state = registry.attach(paths).state()
        if state.live:
            raise UsageError(
                f"--run {name} is {state}, and a live run is never deleted; stop it first (`dali-launch cancel "
                f"{paths.root}`), then prune it"
            )
        found.append(paths)
    return found


def _top_level_runs(root: Path) -> list:
    """ROOT's run directories (not sweeps' points), oldest first by when they started."""
    from dali_launch.trainer.run_dir import RunPaths

    runs = [RunPaths(p.absolute()) for p in root.iterdir() if (p / "config.json").is_file()]
    return sorted(runs, key=lambda p: (_started(p), p.root.name))


def _started(paths) -> float:
    return (paths.launch if paths.launch.exists() else paths.config).stat().st_mtime


def _selected(paths, runs: list, selectors: Selectors, older_than: float | None) -> bool:
    """Whether every selector given holds for the run (a run --run names is chosen anyway)."""
    from dali_launch.launcher.backends import registry
    from dali_launch.launcher.backends.job import last_write

    if not (selectors.failed or older_than is not None or selectors.keep is not None):
        return False
    if selectors.keep is not None and paths in runs[len(runs) - selectors.keep :]:
        return False
    if older_than is not None and time.time() - last_write(paths) < older_than:
        return False
    return not selectors.failed or str(registry.attach(paths).state()) == "failed"


def _decide(paths, named: bool) -> Decision:
    """Whether the run goes: never while live; a resumable one only when --run names it."""
    from dali_launch.launcher.backends import registry
    from dali_launch.launcher.backends.job import RunState, resume_hint
    from dali_launch.trainer.resilience import saved

    state = registry.attach(paths).state()
    if state.live:
        return Decision(paths, str(state), 0, f"{state}: a live run is never deleted")
    unfinished = state in (RunState.INTERRUPTED, RunState.CANCELLED, RunState.FAILED)
    if unfinished and resume_hint(paths) and not named:  # a checkpoint it would go on from
        step = saved.newest(paths).step
        return Decision(
            paths, str(state), 0, f"{state}, resumable from step {step}: --run {paths.root.name} deletes it"
        )
    return Decision(paths, str(state), folder_size(paths.root))


def _delete(paths, say) -> bool:
    """Deletes the run holding its launcher lock (a `--resume` of it is refused meanwhile); False where it
    came alive since it was looked at."""
    from dali_launch.launcher.backends import registry
    from dali_launch.trainer.run_dir import hold_lock, is_locked

    live = registry.attach(paths).live_state()
    lock = None if live else hold_lock(paths.lock("launcher"))
    if lock is None or is_locked(paths.lock("task")):  # its own lock aside, no one may hold the run's
        if lock is not None:
            lock.close()
        say(f"kept {paths.root.name} (it started meanwhile: a live run is never deleted)")
        return False
    with lock:
        shutil.rmtree(paths.root)
    return True


def folder_size(folder: Path) -> int:
    """Bytes of the files under `folder` (links not followed)."""
    return sum(p.lstat().st_size for p in folder.rglob("*") if not p.is_dir() or p.is_symlink())


def size_text(size: int) -> str:
    return f"{size / 1e9:.2f} GB" if size >= 1e9 else f"{size / 1e6:.1f} MB"
