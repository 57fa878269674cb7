"""JAX (XLA's BFC allocator): arrays of several sizes, some deleted. The
compared figure is the allocator's pool (memory_stats()['pool_bytes'],
else 'bytes_reserved'): what XLA took from the driver for its pool, which
XLA 0.11 makes with the virtual memory API (cuMemCreate), so it is
compared with gpumem's `vmm` bytes; XLA's few small cuMemAlloc_v2 buffers
outside the pool (about 50 KB seen) are not in the framework's figure
and show in the report as `outside`. kit.py runs it with default
preallocation and with XLA_PYTHON_CLIENT_PREALLOCATE=false."""
import gc

import jax
import jax.numpy as jnp

from checkpoint import checkpoint


def figures(dev):
    stats = dict(dev.memory_stats() or {})
    key = "pool_bytes" if "pool_bytes" in stats else "bytes_reserved"
    return stats, key


def main():
    dev = jax.devices("gpu")[0]
    held = [jnp.ones((n,), dtype=jnp.uint8, device=dev) for n in (1 << 10, 5 << 20, 256 << 20, 1 << 30)]
    for a in held:
        a.block_until_ready()
    stats, key = figures(dev)
    checkpoint("allocated", stats, key, kinds=["vmm"])
    del held[2:]
    gc.collect()
    stats, key = figures(dev)
    checkpoint("half deleted", stats, key, kinds=["vmm"])


main()
