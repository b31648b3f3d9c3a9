"""The data wait: the devices' idle time while the host waits for a batch, not the host's wait alone."""

from __future__ import annotations

import threading
import time

import pytest

from dali_launch.trainer.observe.input_wait import InputWait


class Finishes:
    """Stands for a device call's output: ready `after` seconds from now (None: never)."""

    def __init__(self, after: float | None):
        self.at = None if after is None else time.perf_counter() + after

    def is_ready(self) -> bool:
        return self.at is not None and time.perf_counter() >= self.at


def slow_read(seconds: float, value="batch"):
    return lambda: time.sleep(seconds) or value


@pytest.fixture
def wait():
    w = InputWait()
    yield w
    w.close()


def test_devices_idle_only_after_their_last_call_ends(wait):
    assert wait.fetch(slow_read(0.3), Finishes(after=0.1)) == "batch"
    assert wait.host_s >= 0.3
    assert wait.idle_s == pytest.approx(wait.host_s - 0.1, abs=0.05)  # the poller's lag, on a busy machine


def test_a_call_running_through_the_wait_costs_nothing(wait):
    wait.fetch(slow_read(0.2), Finishes(after=None))
    wait.fetch(slow_read(0.1), Finishes(after=5))
    assert wait.host_s >= 0.3
    assert wait.idle_s == 0


def test_devices_already_idle_wait_the_whole_time(wait):
    wait.fetch(slow_read(0.2), Finishes(after=0))
    assert wait.idle_s == wait.host_s >= 0.2


def test_a_failed_read_leaves_the_poller_ready_for_the_next(wait):
    def broken():
        time.sleep(0.05)
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        wait.fetch(broken, Finishes(after=None))
    before = wait.host_s
    wait.fetch(slow_read(0.2), Finishes(after=0.1))
    assert wait.idle_s == pytest.approx(wait.host_s - before - 0.1, abs=0.05)


def test_close_ends_the_poller():
    wait = InputWait()
    wait.close()
    assert not wait._poller.is_alive()


def test_a_real_device_call_overlaps_the_wait():
    """XLA dispatches asynchronously: while a long computation runs, a short read costs the device nothing."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def busy(x):
        return jax.lax.fori_loop(0, 40, lambda _, y: jnp.tanh(y @ y), x)

    x = jnp.ones((768, 768)) / 768
    jax.block_until_ready(busy(x))  # compiled
    start = time.perf_counter()
    jax.block_until_ready(busy(x))
    took = time.perf_counter() - start
    wait = InputWait()
    try:
        out = busy(x)
        wait.fetch(slow_read(took / 4), out)
        assert wait.idle_s < took / 8, (wait.idle_s, took)
        jax.block_until_ready(out)
        # the device idles from the call's end (seen by a thread) to the read's end
        before, out, ready = wait.idle_s, busy(x), []
        seen = threading.Thread(target=lambda: ready.append((jax.block_until_ready(out), time.monotonic())[1]))
        seen.start()
        wait.fetch(slow_read(took * 4), out)
        read_end = time.monotonic()
        seen.join()
        # the call's own time is whatever the machine's load makes it: the idle time is measured from its end
        idle = max(0.0, read_end - ready[0])
        assert wait.idle_s - before == pytest.approx(idle, abs=0.05) and idle > 0, (wait.idle_s, idle, took)
    finally:
        wait.close()


def test_the_poller_ends_with_its_block_when_the_loop_raises():
    with pytest.raises(OSError, match="preempted"), InputWait() as wait:
        wait.fetch(slow_read(0.01), Finishes(after=None))
        raise OSError("preempted")
    assert not wait._poller.is_alive()
