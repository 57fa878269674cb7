"""NVIDIA's cuda-bindings across the allocation families, each call's
size known: the truth per kind is the workload's own. A family the
driver refuses is reported (a note) and left out of the truth.

cuMemAlloc_v2, cuMemAllocPitch_v2 (charged pitch x height),
cuMemAllocAsync (default stream), cuMemAllocHost_v2 and cuMemHostAlloc
(host), cuMemAllocManaged (managed), cuMemCreate (VMM, at the device's
granularity) mapped, given access and retained (released twice), and
cuMemAllocFromPoolAsync from pools at each location: the device's current
pool, a host pool made by cuMemPoolCreate, the host's current pool
(cuMemGetMemPool, CUDA 13) and a managed pool (CUDA 13): each charged as
its pool's location.
"""
from cuda.bindings import driver as cu

from checkpoint import checkpoint, report
from driver_call import check

MiB = 1 << 20


def vmm(dev, want):
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = dev
    gran = check(
        cu.cuMemGetAllocationGranularity(prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM)
    )
    size = (want + gran - 1) // gran * gran
    handle = check(cu.cuMemCreate(size, prop, 0))
    va = check(cu.cuMemAddressReserve(size, 0, 0, 0))
    check(cu.cuMemMap(va, size, 0, handle, 0))
    access = cu.CUmemAccessDesc()
    access.location = prop.location
    access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    check(cu.cuMemSetAccess(va, size, [access], 1))
    # A second reference, as NCCL and cuda.core take one: gpumem counts it
    # by the handle's value, which the driver promises is the mapped one.
    retained = check(cu.cuMemRetainAllocationHandle(va))
    if int(retained) != int(handle):
        report(retain_returned_another_handle=[int(handle), int(retained)])

    def free():
        check(cu.cuMemUnmap(va, size))
        check(cu.cuMemRelease(handle))
        check(cu.cuMemRelease(retained))
        check(cu.cuMemAddressFree(va, size))

    return size, free


def pool_props(alloc_type, location_type, location_id):
    props = cu.CUmemPoolProps()
    props.allocType = alloc_type
    props.location.type = location_type
    props.location.id = location_id
    return props


def pools(dev):
    """Pool makers by name: each returns (pool, destroy or None)."""
    T, L = cu.CUmemAllocationType, cu.CUmemLocationType
    host = (L.CU_MEM_LOCATION_TYPE_HOST, -1)

    def created(alloc_type, where):
        pool = check(cu.cuMemPoolCreate(pool_props(alloc_type, *where)))
        return pool, lambda: check(cu.cuMemPoolDestroy(pool))

    def host_current():
        location = cu.CUmemLocation()
        location.type, location.id = host
        return check(cu.cuMemGetMemPool(location, T.CU_MEM_ALLOCATION_TYPE_PINNED)), None

    return {
        "device": lambda: (check(cu.cuDeviceGetMemPool(dev)), None),
        "host": lambda: created(T.CU_MEM_ALLOCATION_TYPE_PINNED, host),
        "host current": host_current,
        "managed": lambda: created(
            T.CU_MEM_ALLOCATION_TYPE_MANAGED, (L.CU_MEM_LOCATION_TYPE_DEVICE, int(dev))
        ),
    }


def synchronize():
    try:
        check(cu.cuCtxSynchronize())
    except Exception as e:  # noqa: BLE001 - the simulated driver has none
        report(synchronize=str(e))


def main():
    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    truth = {"device": 0, "host": 0, "managed": 0}
    frees = []

    def family(name, kind, alloc):
        try:
            size, free = alloc()
        except Exception as e:  # noqa: BLE001 - a refused family is a finding
            report(family=name, refused=str(e))
            return
        truth[kind] += size
        frees.append((kind, size, free))

    def plain(n):
        p = check(cu.cuMemAlloc(n))
        return n, lambda: check(cu.cuMemFree(p))

    def pitch(w, h):
        p, pitch_bytes = check(cu.cuMemAllocPitch(w, h, 4))
        return pitch_bytes * h, lambda: check(cu.cuMemFree(p))

    def stream_ordered(n):
        p = check(cu.cuMemAllocAsync(n, 0))
        return n, lambda: check(cu.cuMemFreeAsync(p, 0))

    def host(n):
        p = check(cu.cuMemAllocHost(n))
        return n, lambda: check(cu.cuMemFreeHost(p))

    def host_alloc(n, flags):
        p = check(cu.cuMemHostAlloc(n, flags))
        return n, lambda: check(cu.cuMemFreeHost(p))

    def managed(n):
        p = check(cu.cuMemAllocManaged(n, 1))
        return n, lambda: check(cu.cuMemFree(p))

    destroys = []

    def from_pool(make, n):
        pool, destroy = make()
        if destroy:
            destroys.append(destroy)
        p = check(cu.cuMemAllocFromPoolAsync(n, pool, 0))
        return n, lambda: check(cu.cuMemFreeAsync(p, 0))

    makers = pools(dev)

    family("cuMemAlloc", "device", lambda: plain(5 * MiB + 3))
    family("cuMemAllocPitch", "device", lambda: pitch(1000, 77))
    family("cuMemAllocAsync", "device", lambda: stream_ordered(6 * MiB))
    family("cuMemCreate", "device", lambda: vmm(dev, 5 * MiB))
    family("cuMemAllocHost", "host", lambda: host(2 * MiB + 1))
    family("cuMemHostAlloc", "host", lambda: host_alloc(3 * MiB, 2))
    family("cuMemAllocManaged", "managed", lambda: managed(4 * MiB))
    family("device pool", "device", lambda: from_pool(makers["device"], 1 * MiB))
    family("host pool", "host", lambda: from_pool(makers["host"], 2 * MiB))
    family("host current pool", "host", lambda: from_pool(makers["host current"], 1 * MiB + 5))
    family("managed pool", "managed", lambda: from_pool(makers["managed"], 2 * MiB))
    synchronize()
    checkpoint("allocated", {"device_bytes": truth["device"]}, "device_bytes", dict(truth))
    for kind, size, free in frees:
        free()
        truth[kind] -= size
    synchronize()
    for destroy in destroys:
        destroy()
    checkpoint("freed", {"device_bytes": truth["device"]}, "device_bytes", dict(truth))


main()
