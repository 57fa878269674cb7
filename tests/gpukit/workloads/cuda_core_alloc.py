"""cuda.core: Device.allocate (the device's current memory pool, stream
ordered), a DeviceMemoryResource of the current pool and one with a pool
of its own, pinned memory from the host's current pool, from a pool of
its own and the legacy way (cuMemAllocHost), managed memory from the
current managed pool and from one preferring the device, a
VirtualMemoryResource (cuMemCreate + map, freed through a retained
handle), a second device's pool where there is one; data copied host ->
device -> host through Buffer.copy_to must survive. The truth is the sum
of the buffers' sizes per kind and device (VMM sizes rounded up to the
granularity the resource asks the driver for). cuda.core before 1.3 never
releases the reference cuMemCreate returns (NVIDIA/cuda-python#2882), so
the driver keeps a closed VirtualMemoryResource buffer's memory until the
process exits: the truth after closing says so."""
import ctypes

try:
    from cuda.core import Device
    import cuda.core as core
except ImportError:
    from cuda.core.experimental import Device
    import cuda.core.experimental as core

from checkpoint import checkpoint, report

MiB = 1 << 20


class Held:
    def __init__(self):
        self.bufs = []
        self.kinds = {"device": 0, "host": 0, "managed": 0, "vmm": 0}
        self.split = {}

    def take(self, buf, kind, device, n):
        self.bufs.append(buf)
        self.kinds[kind] += n
        key = f"{kind}:{device}"
        self.split[key] = self.split.get(key, 0) + n


def resource(name, *args):
    """A memory resource of this version, or None (reported) without it."""
    cls = getattr(core, name, None)
    if cls is None:
        report(missing=name)
        return None
    try:
        return cls(*args)
    except Exception as e:  # noqa: BLE001 - a version or card without it says why
        report(missing=name, error=str(e))
        return None


def options(name, **kw):
    cls = getattr(core, name, None)
    return cls(**kw) if cls else None


def vmm_size(mr, n):
    """What the resource asks cuMemCreate for: n rounded up to the
    granularity it queries (recommended unless configured otherwise)."""
    from cuda.bindings import driver as cu

    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = 0
    flag = cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
    err, gran = cu.cuMemGetAllocationGranularity(prop, flag)
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return -(-n // gran) * gran


def vmm_kept_after_close():
    """Whether this cuda.core leaks VMM memory at close (#2882, before 1.3)."""
    version = tuple(int(x) for x in getattr(core, "__version__", "0.0").split(".")[:2])
    return version < (1, 3)


def copies_survive(held, stream, legacy):
    """Pinned bytes -> a device buffer -> other pinned bytes, compared."""
    n = 2 * MiB + 5
    src, dst, dev = legacy.allocate(n), legacy.allocate(n), Device(0).allocate(n, stream=stream)
    pattern = bytes(range(256)) * (n // 256) + bytes(n % 256)
    ctypes.memmove(int(src.handle), pattern, n)
    src.copy_to(dev, stream=stream)
    dev.copy_to(dst, stream=stream)
    stream.sync()
    assert ctypes.string_at(int(dst.handle), n) == pattern, "data did not survive host -> device -> host"
    held.take(src, "host", 0, n)
    held.take(dst, "host", 0, n)
    held.take(dev, "device", 0, n)


def main():
    dev = Device(0)
    dev.set_current()
    stream = dev.create_stream()
    h = Held()
    for n in (1 * MiB, 9 * MiB + 7, 200 * MiB):
        h.take(dev.allocate(n, stream=stream), "device", 0, n)
    plans = [
        ("DeviceMemoryResource", (0,), "device", 5 * MiB + 1),
        ("DeviceMemoryResource", (0, options("DeviceMemoryResourceOptions", max_size=64 * MiB)), "device", 6 * MiB),
        ("PinnedMemoryResource", (), "host", 3 * MiB),
        ("PinnedMemoryResource", (options("PinnedMemoryResourceOptions"),), "host", 2 * MiB + 3),
        ("LegacyPinnedMemoryResource", (), "host", 4 * MiB),
        ("ManagedMemoryResource", (), "managed", 3 * MiB),
        ("ManagedMemoryResource", (options("ManagedMemoryResourceOptions", preferred_location=0),), "managed", MiB),
    ]
    legacy = None
    for name, args, kind, n in plans:
        mr = resource(name, *args)
        if mr is None:
            continue
        legacy = mr if name == "LegacyPinnedMemoryResource" else legacy
        h.take(mr.allocate(n, stream=stream), kind, 0, n)
    vmr = resource("VirtualMemoryResource", 0)
    if vmr is not None:
        n = 3 * MiB + 11
        h.take(vmr.allocate(n, stream=stream), "vmm", 0, vmm_size(vmr, n))
    if legacy is not None:
        copies_survive(h, stream, legacy)
    if len(Device.get_all_devices() if hasattr(Device, "get_all_devices") else [dev]) > 1:
        one = Device(1)
        one.set_current()
        h.take(one.allocate(7 * MiB + 2, stream=one.create_stream()), "device", 1, 7 * MiB + 2)
        dev.set_current()
    stream.sync()
    on_device = h.kinds["device"] + h.kinds["vmm"]
    checkpoint("allocated", {"device_bytes": on_device}, "device_bytes", h.kinds, split=h.split)
    for b in h.bufs:
        b.close(stream)
    stream.sync()
    kept = {"vmm": h.kinds["vmm"]} if vmm_kept_after_close() and h.kinds["vmm"] else {}
    truth = {k: kept.get(k, 0) for k in h.kinds}
    split = {"vmm:0": kept["vmm"]} if kept else {}
    checkpoint("closed", {"device_bytes": sum(kept.values())}, "device_bytes", truth, split=split)


main()
