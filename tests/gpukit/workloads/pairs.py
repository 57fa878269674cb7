"""Time cuMemAlloc_v2 + cuMemFree_v2 pairs through cuda-bindings on the
real driver: ROUNDS rounds of PAIRS pairs of SIZE bytes; prints one JSON
line with each round's nanoseconds per pair. run.sh runs it before the
agent starts, while it runs, and after it stops, so the three are
measured side by side on one machine.

Usage: pairs.py LABEL [ROUNDS PAIRS SIZE]
"""
import json
import sys
import time

from cuda.bindings import driver as cu

from driver_call import check


def main():
    label = sys.argv[1]
    rounds, pairs, size = (int(a) for a in (sys.argv[2:5] or (7, 2000, 1 << 20)))
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    check(cu.cuMemFree(check(cu.cuMemAlloc(size))))  # warm
    per_pair = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(pairs):
            check(cu.cuMemFree(check(cu.cuMemAlloc(size))))
        per_pair.append((time.perf_counter_ns() - start) // pairs)
    print(json.dumps({"label": label, "size": size, "pairs": pairs, "ns_per_pair": per_pair}))


main()
