"""CuPy's pools. `default`: cupy's MemoryPool over cudaMalloc, compared
with pool.total_bytes() (what the pool holds from the driver), through
free_all_blocks(). `async`: cupy.cuda.MemoryAsyncPool over
cudaMallocAsync (the driver's own pool), compared with used_bytes() (the
live allocations, what gpumem charges; the pool's reserve stays with the
driver).

Usage: cupy_alloc.py default|async
"""
import sys

import cupy

from checkpoint import checkpoint

MiB = 1 << 20


def main():
    mode = sys.argv[1]
    if mode == "async":
        pool = cupy.cuda.MemoryAsyncPool()
        cupy.cuda.set_allocator(pool.malloc)
        compare = "used_bytes"
    else:
        pool = cupy.get_default_memory_pool()
        compare = "total_bytes"

    def figures():
        return {"used_bytes": pool.used_bytes(), "total_bytes": pool.total_bytes()}

    held = [cupy.empty(n, dtype=cupy.uint8) for n in (100, 1 * MiB, 7 * MiB + 5, 300 * MiB)]
    cupy.cuda.Device().synchronize()
    checkpoint("allocated", figures(), compare)
    del held[1::2]
    cupy.cuda.Device().synchronize()
    checkpoint("half deleted", figures(), compare)
    if mode == "default":
        pool.free_all_blocks()
        checkpoint("free_all_blocks", figures(), compare)


main()
