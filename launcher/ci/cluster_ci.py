"""`dali-launch ci`: the project's tests and a short multi-node training run on a real SLURM queue.

The training run (one epoch over --nodes × --gpus-per-node by default) goes the route every run goes
(route/launch.py: checks, run directory, the SLURM backend follows it, its report), with a test step
beside it: pytest on one node, its own JUnit XML. Both are waited for with a deadline and cancelled on
timeout; one JUnit file then holds pytest's cases and one case per training rank, which CI systems read.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from dali_launch.launcher.backends.follow import POLL_S, task_error
from dali_launch.launcher.backends.slurm import Slurm
from dali_launch.launcher.backends.slurm_queue import cancel, queue_state
from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer.config import opt
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, headline


@dataclass(frozen=True)
class CiConfig:
    tests: str = opt("tests", "What pytest runs on the cluster: folders or files of this checkout, space-separated.")
    pytest_args: str = opt("-m 'not slurm'", "Arguments for pytest, as one shell-quoted string.")
    junit: str = opt("ci-results.xml", "Where to write the combined JUnit XML.")
    min_accuracy: float = opt(0.8, "Smallest test accuracy the training run must reach.")


def run_ci(run: RunConfig, ci: CiConfig) -> int:
    """The training run through the route (prepare, the SLURM backend, its report) with the tests beside it."""
    from dali_launch.launcher.route.launch import report, start

    targets, pytest_args = _split(ci.tests, "--tests"), _split(ci.pytest_args, "--pytest-args")
    missing = [t for t in targets if not Path(t).exists()]
    if missing or not targets:
        raise UsageError(
            f"--tests {' '.join(missing) or repr(ci.tests)} not found here; run from the project's "
            f"checkout or pass existing test folders or files"
        )
    tests = TestStep(targets, pytest_args)
    backend = Slurm(beside=(tests,))
    started = start([run], backend)
    if started is None:  # --dry-run: the training job's plan; nothing is submitted
        return 0
    report(started)
    (paths,) = started.paths
    suites = [
        _training_suite(backend.attach(paths).submitit_job(), paths, ci.min_accuracy),
        *_pytest_suites(tests.junit, tests.job),
    ]
    root = ET.Element("testsuites")
    root.extend(suites)
    ET.ElementTree(root).write(ci.junit, encoding="utf-8", xml_declaration=True)
    failures = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    print(f"JUnit XML: {Path(ci.junit).absolute()} ({failures} failed)", flush=True)
    return 1 if failures or not tests.finished else 0


def _split(text: str, flag: str) -> list[str]:
    """A shell-quoted flag value as words, split before anything is submitted."""
    try:
        return shlex.split(text)
    except ValueError as e:
        raise UsageError(f"{flag} {text!r} is not valid shell quoting ({e}); balance its quotes") from None


class TestStep:
    """The test suite as a job beside the training run's (backends/slurm.py's SideJob): one node, one task,
    where the training runs, with the same setup lines; its JUnit XML in the run directory."""

    __test__ = False  # pytest: not a test class

    def __init__(self, targets: list[str], pytest_args: list[str]):
        self.targets, self.pytest_args = targets, pytest_args
        self.job, self.junit, self.finished = None, None, False

    def submit(self, run: RunConfig, paths: RunPaths) -> None:
        from dali_launch.launcher.backends.slurm import make_executor
        from dali_launch.launcher.ci.ci_job import run_pytest

        one_task = dataclasses.replace(
            run, launch=dataclasses.replace(run.launch, nodes="1", tasks_per_node=1, name=f"{run.launch.name}-tests")
        )
        self.junit = paths.root / "junit-pytest.xml"
        executor = make_executor(one_task, paths.root / "ci-tests")
        self.job = executor.submit(
            run_pytest, str(Path.cwd()), self.targets, str(self.junit), self.pytest_args, run.slurm.time_min * 60
        )
        print(f"submitted test job {self.job.job_id}", flush=True)

    def wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while queue_state(self.job.job_id) is not None:
            if time.monotonic() > deadline:
                cancel(self.job.job_id)
                print(f"dali-launch: test job still running after {timeout_s:.0f} s; cancelled it", file=sys.stderr)
                return
            time.sleep(POLL_S)
        self.finished = True


def _case(suite: ET.Element, name: str, failure: str | None) -> None:
    case = ET.SubElement(suite, "testcase", classname=suite.get("name"), name=name)
    if failure:
        ET.SubElement(case, "failure", message=failure.strip().splitlines()[-1][:200]).text = failure


def _training_suite(job, paths: RunPaths, min_accuracy: float) -> ET.Element:
    suite = ET.Element("testsuite", name="dali-launch.training")
    for rank in range(job.num_tasks):
        done = job.task(rank).paths.result_pickle.exists()
        error = task_error(job, rank) or (None if done else "no result: cancelled, timed out or killed")
        print(f"training rank {rank}: exit {'0' if done and not task_error(job, rank) else 'non-zero'}")
        _case(suite, f"rank-{rank}", error)
    accuracy = headline(job.task(0).result()["final"])[1] if paths.result.exists() else None
    _case(
        suite,
        "accuracy",
        None
        if accuracy is not None and accuracy >= min_accuracy
        else f"test accuracy {accuracy} is below --min-accuracy {min_accuracy}",
    )
    _count(suite)
    return suite


def _pytest_suites(junit: Path, job) -> list[ET.Element]:
    result = job.task(0).result() if job.task(0).paths.result_pickle.exists() else None
    print(f"test job: exit {result['exit_code'] if result else 'none (no result)'}")
    if junit.exists():
        root = ET.parse(junit).getroot()
        return list(root) if root.tag == "testsuites" else [root]
    suite = ET.Element("testsuite", name="dali-launch.tests")
    _case(suite, "pytest", result["output_tail"] if result else "the test job left no result and no JUnit XML")
    _count(suite)
    return [suite]


def _count(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", "0")
