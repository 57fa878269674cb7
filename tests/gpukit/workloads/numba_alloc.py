"""numba-cuda: device arrays (to_device and back: the data must survive),
pinned, mapped and managed arrays the workload writes into. The truth is
the workload's own: nbytes per memory kind. Deferred frees are flushed
before the last checkpoint."""
import numpy as np
from numba import cuda

from checkpoint import checkpoint

MiB = 1 << 20


def main():
    truth = {"device": 0, "host": 0, "managed": 0}
    dev = [cuda.device_array(n, dtype=np.uint8) for n in (4096, 3 * MiB + 1, 64 * MiB)]
    src = np.arange(2 * MiB, dtype=np.uint32)
    dev.append(cuda.to_device(src))
    assert (dev[-1].copy_to_host() == src).all(), "data did not survive the round trip"
    truth["device"] = sum(a.nbytes for a in dev)
    pinned = cuda.pinned_array(5 * MiB, dtype=np.uint8)
    mapped = cuda.mapped_array(6 * MiB, dtype=np.uint8)
    managed = cuda.managed_array(7 * MiB, dtype=np.uint8)
    for a in (pinned, mapped, managed):
        a[:] = 7
    truth["host"] = pinned.nbytes + mapped.nbytes
    truth["managed"] = managed.nbytes
    checkpoint("allocated", {"device_bytes": truth["device"]}, "device_bytes", truth)
    dev.clear()
    cuda.current_context().memory_manager.deallocations.clear()
    truth["device"] = 0
    checkpoint("device arrays freed", {"device_bytes": 0}, "device_bytes", truth)


main()
