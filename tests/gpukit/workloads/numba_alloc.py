"""numba-cuda: device arrays (to_device and back, on the default stream
and on a stream of its own: the data must survive), pinned, mapped and
managed arrays the workload writes into, host memory pinned in place
(`cuda.pinned`), a second device's arrays where there is one, the
driver's free/total (`get_memory_info`), and deferred frees flushed. The
truth is the workload's own: nbytes per memory kind and device."""
import numpy as np
from numba import cuda

from checkpoint import checkpoint

MiB = 1 << 20


class Truth:
    """Bytes held per memory kind, and per `kind:device`."""

    def __init__(self):
        self.kinds = {"device": 0, "host": 0, "managed": 0}
        self.split = {}

    def add(self, kind, device, n):
        self.kinds[kind] += n
        key = f"{kind}:{device}"
        self.split[key] = self.split.get(key, 0) + n
        if self.split[key] == 0:
            del self.split[key]

    def point(self, name, **framework):
        info = cuda.current_context().get_memory_info()
        framework = {"device_bytes": self.kinds["device"], "free": info.free, "total": info.total, **framework}
        checkpoint(name, framework, "device_bytes", dict(self.kinds), split=dict(self.split))


def round_trip(src, stream=0):
    d = cuda.to_device(src, stream=stream)
    back = d.copy_to_host(stream=stream)
    if stream:
        stream.synchronize()
    assert (back == src).all(), "data did not survive the round trip"
    return d


def main():
    t = Truth()
    dev = [cuda.device_array(n, dtype=np.uint8) for n in (4096, 3 * MiB + 1, 64 * MiB)]
    dev.append(round_trip(np.arange(2 * MiB, dtype=np.uint32)))
    stream = cuda.stream()
    dev.append(round_trip(np.arange(MiB + 3, dtype=np.uint8) * 3, stream))
    t.add("device", 0, sum(a.nbytes for a in dev))
    pinned = cuda.pinned_array(5 * MiB, dtype=np.uint8)
    mapped = cuda.mapped_array(6 * MiB, dtype=np.uint8)
    managed = cuda.managed_array(7 * MiB, dtype=np.uint8)
    for written in (pinned, mapped, managed):
        written[:] = 7
        assert int(written.sum()) == 7 * written.size, "the client's writes did not stay"
    t.add("host", 0, pinned.nbytes + mapped.nbytes)
    t.add("managed", 0, managed.nbytes)
    others = []
    if len(cuda.gpus) > 1:
        with cuda.gpus[1]:
            others = [cuda.device_array(n, dtype=np.uint8) for n in (8 * MiB, 12345)]
            others.append(round_trip(np.full(MiB, 9, dtype=np.uint16)))
        t.add("device", 1, sum(a.nbytes for a in others))
    t.point("allocated")
    own = np.ones(3 * MiB, dtype=np.uint8)
    with cuda.pinned(own):
        t.add("host", 0, own.nbytes)
        d = cuda.to_device(own, stream=stream)
        stream.synchronize()
        t.add("device", 0, d.nbytes)
        t.point("pinned in place")
    t.add("host", 0, -own.nbytes)
    dev.append(d)
    del d
    dev.clear()
    others.clear()
    for gpu in cuda.gpus:
        with gpu:
            cuda.current_context().memory_manager.deallocations.clear()
    for key in [k for k in t.split if k.startswith("device:")]:
        t.add("device", int(key.split(":")[1]), -t.split[key])
    t.point("device arrays freed")


main()
