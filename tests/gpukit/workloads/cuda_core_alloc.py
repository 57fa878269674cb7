"""cuda.core: Device.allocate (the device's default memory pool, stream
ordered), then a pinned and a managed memory resource where this version
has them. The truth is the sum of the buffers' sizes per kind."""
try:
    from cuda.core import Device
    import cuda.core as core
except ImportError:
    from cuda.core.experimental import Device
    import cuda.core.experimental as core

from checkpoint import checkpoint, report

MiB = 1 << 20


def main():
    dev = Device(0)
    dev.set_current()
    stream = dev.create_stream()
    truth = {"device": 0, "host": 0, "managed": 0}
    bufs = []
    for n in (1 * MiB, 9 * MiB + 7, 200 * MiB):
        bufs.append(dev.allocate(n, stream=stream))
        truth["device"] += n
    for kind, name in (("host", "PinnedMemoryResource"), ("managed", "ManagedMemoryResource")):
        cls = getattr(core, name, None)
        if cls is None:
            report(missing=name)
            continue
        try:
            mr = cls()
        except TypeError:
            mr = cls(dev.device_id)
        except Exception as e:  # noqa: BLE001 - a version without it says why
            report(missing=name, error=str(e))
            continue
        bufs.append(mr.allocate(3 * MiB, stream=stream))
        truth[kind] += 3 * MiB
    stream.sync()
    checkpoint("allocated", {"device_bytes": truth["device"]}, "device_bytes", truth)
    for b in bufs:
        b.close(stream)
    stream.sync()
    checkpoint("closed", {"device_bytes": 0}, "device_bytes", {"device": 0, "host": 0, "managed": 0})


main()
