"""What the job's processes tell each other through jax.distributed's coordination service (process 0
runs it): small values in its key-value store. No file system, and no device collective (which would
compile a program and, on CPU, queue a gloo call beside the steps').
What stays O(N) is process 0's: it hosts the service, so it answers every rank's registration,
barrier arrival and published value (`collect` returns N values in one call); each rank's cost is O(1).

Keys live under one prefix and are the job's own: the service starts afresh with every start of the
job (a requeue, a resume), so nothing published by an earlier start can be read by a later one.
"""

from __future__ import annotations

PREFIX = "dali-launch/"


def _client():
    from dali_launch.trainer.jax_private import distributed_client  # the client the barrier uses too

    return distributed_client()


def publish(key: str, value: str) -> None:
    _client().key_value_set(PREFIX + key, value)


def collect(folder: str) -> dict[str, str]:
    """Every value published under `folder/`, by the rest of its key (one call to the service)."""
    head = f"{PREFIX}{folder}/"
    return {key[len(head) :]: value for key, value in _client().key_value_dir_get(head)}


def wait_for(key: str, timeout_s: int, process_index: int) -> str:
    """The value of `key` once some process published it; TimeoutError after `timeout_s`, naming this process
    (`process_index`)."""
    try:
        return _client().blocking_key_value_get(PREFIX + key, timeout_s * 1000)
    except Exception as e:  # JaxRuntimeError: DEADLINE_EXCEEDED, or the service gone
        raise TimeoutError(f"process {process_index}: '{key}' was not published within {timeout_s} s ({e})") from e
