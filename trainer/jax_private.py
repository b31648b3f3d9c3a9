"""JAX's private parts the trainer leans on, in one module: checked against JAX 0.10.2 (the CPU machines') and
0.11.2 (the GPU machines'). Each is a name JAX keeps under jax._src alone; a JAX that moves one breaks here,
and tests/test_compile_cache.py and the multi-process tests find it.

    distributed_client   jax.distributed's coordination client: its key-value store (coordination.py) and its
                         barrier with a timeout (topology.barrier; multihost_utils' has none and hangs on a dead peer)
    compiler             the persistent compilation cache's writer (compile_cache.py keeps non-zero processes'
                         programs), and the smallest compile time an entry is written for
    compilation_cache    the cache's own entry format, to write those programs as JAX would
    backends_started     whether JAX has started its backends (any device query does): jax.distributed.initialize
                         and XLA's flags must come first (topology.initialize, plan/placement.py)
"""

from __future__ import annotations

import sys


def backends_started() -> bool:
    """Whether JAX has started its backends in this process; False where JAX is not even imported."""
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def distributed_client():
    """The client jax.distributed.initialize made (None before it)."""
    from jax._src import distributed

    return distributed.global_state.client


def compiler():
    """jax._src.compiler, whose `_cache_write` writes a compiled program to the persistent cache."""
    from jax._src import compiler as module

    return module


def min_compile_time_s() -> float:
    """JAX's threshold: programs compiled faster than this are not cached."""
    from jax._src.config import persistent_cache_min_compile_time_secs

    return persistent_cache_min_compile_time_secs.value


def compilation_cache():
    from jax._src import compilation_cache as module

    return module
