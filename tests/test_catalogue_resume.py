"""The catalogue of bad inputs, continued: `--resume` of a run that cannot go on as asked (its data
gone, or a checkpoint that cannot continue on the devices or data given, in either sample order). Each ends with one exact
line on stderr and exit code 2, nothing written, nothing started (see catalogue.py).
"""

from __future__ import annotations

import shutil

import pytest
from catalogue import dataset, global_order_run, good_records, run_entry

from dali_launch.launcher.route import directory
from dali_launch.launcher.run_config import LaunchConfig, RunConfig
from dali_launch.trainer.data import records


@pytest.mark.parametrize("command", [["train"], ["--local"]], ids=["train", "local"])
def test_resume_of_a_run_whose_data_is_gone(capsys, place, nothing_starts, command):
    """--resume checks the data the run's config.json names, as a new run's: deleted, it was a DALI traceback."""
    folder, _ = place
    (folder / "kept").mkdir()
    data = dataset(folder / "kept")["data"]
    backend = "none" if command == ["train"] else "local"
    run = RunConfig(launch=LaunchConfig(run_root=str(folder / "old-runs"), gpus_per_node=1, local=backend == "local"))
    run_dir = directory.create(run, data, backend).root
    shutil.rmtree(data)
    run_entry(
        capsys,
        folder,
        [*command, "--resume", str(run_dir)],
        f"--resume {run_dir}: its data_dir {data} does "
        f"not exist; make it with `dali-launch data prepare --from IDX_DIR --to {data}`",
    )


def test_elastic_resume_that_cannot_keep_the_global_batch(capsys, place, nothing_starts):
    """A global-order run of global batch 120 resumed on 7 devices: 120 does not split (elastic.py)."""
    folder, _ = place
    run_dir = global_order_run(folder, dataset(folder)["data"])
    run_entry(
        capsys,
        folder,
        ["--local", "--resume", str(run_dir), "--gpus-per-node", "7", "--processes", "7"],
        "the run's global batch 120 cannot be split over 7 devices; resume on a device count that divides it "
        "(1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 24, 30, 40, 60), or add --elastic-batch rescale",
    )


def test_elastic_resume_that_cannot_rescale_accumulated_steps(capsys, place, nothing_starts):
    """--accumulate-steps 2 makes updates of 2 × 120 samples: no exact rescale rule for a group cut mid-way."""
    folder, _ = place
    run_dir = global_order_run(folder, dataset(folder)["data"], accumulate_steps=2)
    run_entry(
        capsys,
        folder,
        ["--local", "--resume", str(run_dir), "--gpus-per-node", "3", "--processes", "1", "--elastic-batch", "rescale"],
        "--elastic-batch rescale cannot continue --accumulate-steps 2 on 3 devices (its updates are groups of 2 "
        "steps of 120 samples); resume with --elastic-batch keep on a device count that divides 120 "
        "(1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 24, 30, 40, 60)",
    )


@pytest.mark.parametrize("order", ["global", "shards"])
def test_elastic_resume_on_another_data_set(capsys, place, nothing_starts, order):
    """The run's data_dir now holds 5 samples, not the 4 its checkpoint numbered (either order's record)."""
    folder, _ = place
    data = dataset(folder)["data"]
    run_dir = global_order_run(folder, data, order)
    was = records.fingerprint_of(data / "training")["keys_sha256"][:12]
    shutil.rmtree(data / "training")
    (folder / "other").mkdir()
    (dataset(folder / "other", training=good_records(5))["data"] / "training").rename(data / "training")
    now = records.fingerprint_of(data / "training")["keys_sha256"][:12]
    run_entry(
        capsys,
        folder,
        ["--local", "--resume", str(run_dir)],
        f"--resume {run_dir}: its checkpoint was written for a training set of 4 samples (keys {was}), but "
        f"{data} now holds 5 (keys {now}); restore the run's data there, or start a new run",
    )
