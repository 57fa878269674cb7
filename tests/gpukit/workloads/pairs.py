"""Time allocation pairs through cuda-bindings on the real driver:
ROUNDS rounds of PAIRS pairs of SIZE bytes; prints one JSON line with each
round's nanoseconds per pair. LOOP `plain` times cuMemAlloc_v2 +
cuMemFree_v2; `pool` times cuMemAllocAsync + cuMemFreeAsync on the legacy
stream (the device's default pool: what PyTorch's cudaMallocAsync backend
calls per tensor), synchronising the stream after each round. run.sh runs
both before the agent starts, while it runs, and after it stops, so they
are measured side by side on one machine.

Usage: pairs.py LABEL [ROUNDS PAIRS SIZE [LOOP]]
"""
import json
import sys
import time

from cuda.bindings import driver as cu

from driver_call import check


def main():
    label = sys.argv[1]
    rounds, pairs, size = (int(a) for a in (sys.argv[2:5] or (7, 2000, 1 << 20)))
    loop = sys.argv[5] if len(sys.argv) > 5 else "plain"
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    stream = cu.CUstream(0)
    if loop == "pool":
        def pair():
            check(cu.cuMemFreeAsync(check(cu.cuMemAllocAsync(size, stream)), stream))
    elif loop == "plain":
        def pair():
            check(cu.cuMemFree(check(cu.cuMemAlloc(size))))
    else:
        sys.exit(f"pairs.py: LOOP is plain or pool, not {loop!r}")
    pair()  # warm
    check(cu.cuStreamSynchronize(stream))
    per_pair = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(pairs):
            pair()
        check(cu.cuStreamSynchronize(stream))
        per_pair.append((time.perf_counter_ns() - start) // pairs)
    print(json.dumps({"label": label, "loop": loop, "size": size, "pairs": pairs, "ns_per_pair": per_pair}))


main()
