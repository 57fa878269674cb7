"""What real clients are told of the card: NVIDIA's cuda-bindings
(cuMemGetInfo, cuDeviceTotalMem), numba-cuda (get_memory_info, which
frameworks and users size batches from) and NVML through cuda-bindings'
own NVML module (nvmlDeviceGetMemoryInfo_v2, as vLLM reads the card).

The process first allocates HOLD bytes (argument 1, default 64 MiB) on
device 0, asks every client, then does what JAX does by default: asks for
75% of the total it was told, in one call. It prints one JSON line with
everything it saw and the result of that call (0: allocated) and exits.
Under a limit with view=limit gpumem tells every client the limit as the
card's size; elsewhere they see the card.
"""
import json
import os
import sys

from cuda.bindings import driver, nvml
from numba import cuda

MIB = 1 << 20


def ok(result, what):
    err, *rest = result
    if err != driver.CUresult.CUDA_SUCCESS:
        raise SystemExit(f"{what} failed: {err}")
    return rest[0] if len(rest) == 1 else rest


def main():
    hold = int(sys.argv[1]) if len(sys.argv) > 1 else 64 * MIB
    ok(driver.cuInit(0), "cuInit")
    dev = ok(driver.cuDeviceGet(0), "cuDeviceGet")
    ctx = ok(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    ok(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    held = ok(driver.cuMemAlloc(hold), "cuMemAlloc")
    free, total = ok(driver.cuMemGetInfo(), "cuMemGetInfo")
    device_total = ok(driver.cuDeviceTotalMem(dev), "cuDeviceTotalMem")
    numba_free, numba_total = cuda.current_context().get_memory_info()
    nvml.init_v2()
    memory = nvml.device_get_memory_info_v2(nvml.device_get_handle_by_index_v2(0))
    (err, big) = driver.cuMemAlloc(total // 4 * 3)
    if err == driver.CUresult.CUDA_SUCCESS:
        ok(driver.cuMemFree(big), "cuMemFree")
    ok(driver.cuMemFree(held), "cuMemFree")
    line = {
        "pid": os.getpid(),
        "held": hold,
        "cuda_bindings": {"free": int(free), "total": int(total), "device_total": int(device_total)},
        "numba": {"free": int(numba_free), "total": int(numba_total)},
        "nvml": {
            "total": int(memory.total),
            "reserved": int(memory.reserved),
            "free": int(memory.free),
            "used": int(memory.used),
        },
        "preallocated": {"asked": int(total // 4 * 3), "result": int(err)},
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
