"""Allocate through NVIDIA's own cuda-bindings and print ground truth.

NVIDIA's client dlopens libcuda.so.1 and resolves every driver function
through cuGetProcAddress_v2 (by name, API version and stream flags), as
PyTorch's and JAX's runtimes do. The output format is gpumem-workload's:
one JSON checkpoint per line, then a wait for a line on stdin.

Usage: cuda_bindings_workload.py DEVICE
"""
import json
import os
import sys

from cuda.bindings import driver as cu


def check(result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise SystemExit(f"driver call failed: {err}")
    return rest[0] if len(rest) == 1 else rest


truth = {"held": 0, "allocs": 0, "frees": 0, "failed": 0}


def checkpoint(name):
    print(json.dumps({"checkpoint": name, "pid": os.getpid(), **truth}), flush=True)
    sys.stdin.readline()


def main():
    device = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(device))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    held = []
    for size in (1 << 20, 12345, 8 << 20, 64):
        held.append((check(cu.cuMemAlloc(size)), size, False))
        truth["held"] += size
        truth["allocs"] += 1
    # Stream-ordered, on the default stream: with
    # CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1 cuda-bindings resolves
    # the _ptsz exports through cuGetProcAddress.
    for size in (3 << 20, 777):
        held.append((check(cu.cuMemAllocAsync(size, 0)), size, True))
        truth["held"] += size
        truth["allocs"] += 1
    checkpoint("allocated")
    for ptr, size, stream_ordered in held[:2] + held[-1:]:
        check(cu.cuMemFreeAsync(ptr, 0) if stream_ordered else cu.cuMemFree(ptr))
        truth["held"] -= size
        truth["frees"] += 1
    checkpoint("freed")


main()
