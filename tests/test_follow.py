"""How the follow loop words a SLURM job's end, on a job's files as submitit and slurmstepd leave them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from submitit.core.utils import cloudpickle_dump

from dali_launch.launcher.backends import follow
from dali_launch.trainer.resilience import ending
from dali_launch.trainer.run_dir import RunPaths

CANCEL_LINE = "slurmstepd-node1: error: *** JOB 77 ON node1 CANCELLED AT 2026-11-30T06:11:15 ***\n"
PEER_LOST = (
    "Traceback (most recent call last):\n  ...\nJaxRuntimeError: Gloo all-reduce failed: Connection reset by peer\n"
)


def fake_job(root: Path, stderr: dict[int, str], errors: dict[int, str]):
    """A two-rank job: per rank a stderr text and, for some, a submitit result file holding an error."""

    def task(rank: int):
        paths = SimpleNamespace(
            stdout=root / f"{rank}.out", stderr=root / f"{rank}.err", result_pickle=root / f"{rank}_result.pkl"
        )
        return SimpleNamespace(paths=paths)

    for rank, text in stderr.items():
        (root / f"{rank}.err").write_text(text)
    for rank, text in errors.items():
        cloudpickle_dump(("error", text), root / f"{rank}_result.pkl")
    return SimpleNamespace(job_id="77", num_tasks=2, task=task)


@pytest.fixture
def cancels(monkeypatch) -> list[str]:
    calls = []
    monkeypatch.setattr(follow, "cancel", calls.append)
    return calls


def test_a_rank_that_fails_after_a_scancel_is_not_the_cause(tmp_path, capsys, cancels):
    """scancel killed rank 0 first; rank 1 lost its peer and wrote its error before it was killed too."""
    job = fake_job(tmp_path, {0: CANCEL_LINE + "srun: error: node1: task 0: Killed\n"}, {1: PEER_LOST})
    assert follow.follow(job, RunPaths(tmp_path), timeout_s=10, echo=lambda line: None) == 1
    err = capsys.readouterr().err
    assert "rank 0 on node1: Killed (srun)" in err
    assert err.strip().endswith("job 77 ended without a result: cancelled at 2026-11-30T06:11:15")
    assert "Gloo" not in err and cancels == ["77"]


def test_a_rank_that_fails_on_its_own_shows_its_traceback(tmp_path, capsys, cancels):
    job = fake_job(tmp_path, {0: "", 1: ""}, {1: PEER_LOST})
    assert follow.follow(job, RunPaths(tmp_path), timeout_s=10, echo=lambda line: None) == 1
    err = capsys.readouterr().err
    assert "dali-launch: rank 1 of job 77 failed:" in err and "Gloo all-reduce failed" in err
    assert "cancelled" not in err and cancels == ["77"]  # the others would wait for the dead rank


def test_the_console_gets_the_runs_own_lines_and_logs_get_every_line(tmp_path, capsys, cancels, monkeypatch):
    """A submitted task's library threads' lines (tagged: library_output.py), srun's lines (the story retells
    them) and, once rank 0 ended the job in a line of ours, rank 1's reaction stay off the followed console;
    `dali-launch logs` prints every line, untagged."""
    from dali_launch.launcher.commands.jobs import print_logs
    from dali_launch.trainer.observe.library_output import tagged

    orbax = tagged("Traceback (most recent call last):\n\nOSError: [Errno 28] No space left on device\n")
    said = {0: "epoch 0: loss 2.0\n" + orbax + "srun: error: node1: task 0: Exited\n", 1: ""}
    job = fake_job(tmp_path, said, {0: "Traceback (most recent call last):\nOSError: [Errno 28] No space left"})
    (tmp_path / "1.err").write_text("F1206 client.h:80] Terminating process because the JAX distributed service\n")
    ending.record(RunPaths(tmp_path), 0, ending.FAILED, "cannot write checkpoint: No space left", explained=True)
    monkeypatch.setattr(follow, "queue_entry", lambda job_id: (None, ""))
    shown = []
    assert follow.follow(job, RunPaths(tmp_path), timeout_s=10, echo=shown.append) == 1
    assert shown == ["[rank 0] epoch 0: loss 2.0"], shown
    assert capsys.readouterr().err.strip() == "dali-launch: cannot write checkpoint: No space left"
    logs = []
    job.logs, job.name = (lambda rank: [job.task(rank).paths.stderr]), "job 77"
    print_logs(job, 0, None, logs.append)
    assert logs[1:4] == ["Traceback (most recent call last):", "", "OSError: [Errno 28] No space left on device"]


def test_a_job_slurm_keeps_queued_or_requeues_is_not_cancelled_one_running_too_long_is(
    tmp_path, capsys, cancels, monkeypatch
):
    """The follower's bound is a start's run, not the queue's wait: a job queued (a busy cluster) or requeued
    (SLURM's time-limit warning; seen on the test cluster: a --time-min 1 job requeued every minute, held
    ~2 min between starts) past it goes on; one that runs past it is cancelled; one queued past
    QUEUED_FOLLOW_S is left queued."""
    job, paths = fake_job(tmp_path, {0: "", 1: ""}, {}), RunPaths(tmp_path)
    monkeypatch.setattr(follow, "POLL_S", 0.01)
    states = iter(["PENDING"] * 30 + ["RUNNING"] * 3 + ["REQUEUED"] * 30 + ["RUNNING"] * 3)
    monkeypatch.setattr(follow, "queue_entry", lambda job_id: (next(states, None), "None"))
    follow.follow(job, paths, timeout_s=0.1, echo=lambda line: None)
    assert cancels == [] and "cancelled it" not in capsys.readouterr().err

    monkeypatch.setattr(follow, "queue_entry", lambda job_id: ("RUNNING", "None"))
    assert follow.follow(job, paths, timeout_s=0.1, echo=lambda line: None) == 1
    assert cancels == ["77"] and "job 77 still running past its time limit; cancelled it" in capsys.readouterr().err

    monkeypatch.setattr(follow, "queue_entry", lambda job_id: ("PENDING", "Priority"))
    monkeypatch.setattr(follow, "QUEUED_FOLLOW_S", 0.1)
    assert follow.follow(job, paths, timeout_s=0.05, echo=lambda line: None) == 1
    err = capsys.readouterr().err
    assert cancels == ["77"] and "job 77 still waits in the queue" in err and "it stays queued" in err, err


def test_each_poll_reads_rank_0_and_a_bounded_turn_of_the_others():
    tails = [(rank, f"tail-{rank}") for rank in range(20)]
    polls = [follow._due(tails, poll) for poll in range(3)]
    assert all(len(due) == 1 + follow.FOLLOWED_PER_POLL and due[0] == (0, "tail-0") for due in polls)
    assert {rank for due in polls for rank, _ in due} == set(range(20))  # every rank within 3 polls
    assert follow._due(tails[:9], 5) == tails[:9]  # a job of up to 9 ranks: every log, every poll


def test_while_the_job_runs_only_the_rank_its_cause_names_is_read(tmp_path, capsys, cancels, monkeypatch):
    """A 2-rank job still queued: rank 1 recorded the job's cause; its result is read, not every rank's."""
    job = fake_job(tmp_path, {0: "", 1: ""}, {1: PEER_LOST})
    ending.record(RunPaths(tmp_path), 1, ending.FAILED, "rank 1 failed: JaxRuntimeError: Gloo")
    read = []
    real = follow.task_error
    monkeypatch.setattr(follow, "task_error", lambda job, rank: read.append(rank) or real(job, rank))
    monkeypatch.setattr(follow, "queue_entry", lambda job_id: ("RUNNING", "None"))
    assert follow.follow(job, RunPaths(tmp_path), timeout_s=10, echo=lambda line: None) == 1
    # The poll reads rank 1's result alone; reporting the failure then reads every rank's, once.
    assert read == [1, 0, 1] and "dali-launch: rank 1 of job 77 failed:" in capsys.readouterr().err


def test_srun_s_word_on_dead_tasks_names_ranks_as_we_count_them(tmp_path):
    """One task of two digits is one rank ("rank 15", as scale.py's kill of rank 15 of 16 printed it
    "ranks 15" before); a range stays plural."""
    stderr = "srun: error: node4: task 15: Killed\nsrun: error: node2: tasks 2-3: Aborted\n"
    job = fake_job(tmp_path, {0: stderr, 1: ""}, {})
    assert follow._said(job) == [
        "dali-launch: rank 15 on node4: Killed (srun)",
        "dali-launch: ranks 2-3 on node2: Aborted (srun)",
    ]
