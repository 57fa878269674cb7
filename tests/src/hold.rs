//! The workload's `hold`: `n` allocations of `size` bytes, checkpoint
//! `held`, each freed, checkpoint `freed` (with `--pause`, held until a
//! line on stdin). With `--vmm` each is a VMM handle (`cuMemCreate`)
//! mapped at an address of its own (`cuMemAddressReserve`, `cuMemMap`),
//! as PyTorch's expandable segments hold memory, freed by `cuMemUnmap`
//! then `cuMemRelease`.
use crate::{
    driver::{check, CUresult as R, Driver},
    pools::{PoolProps, DEVICE, PINNED},
    truth::Truth,
};

/// Holds `n` allocations of `size` bytes (VMM handles if `vmm`), then
/// frees them, calling `checkpoint` after each step.
pub fn run(
    d: &Driver,
    t: &Truth,
    (n, size, vmm): (usize, usize, bool),
    checkpoint: &dyn Fn(&str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    if vmm {
        let held: Vec<Mapped> = (0..n)
            .map(|_| create_mapped(d, size).inspect(|_| t.allocated_as("vmm", 0, size as u64)))
            .collect::<Result<_, _>>()?;
        checkpoint("held")?;
        for m in &held {
            unmap_release(d, m)?;
            t.freed_as("vmm", 0, size as u64);
        }
    } else {
        let alloc = |_| d.alloc(size).map_err(|e| anyhow::anyhow!("cuMemAlloc_v2({size}) returned {e}"));
        let held: Vec<u64> =
            (0..n).map(|i| alloc(i).inspect(|_| t.allocated(size as u64))).collect::<Result<_, _>>()?;
        checkpoint("held")?;
        for p in held {
            d.free(p)?;
            t.freed(size as u64);
        }
    }
    checkpoint("freed")
}

/// One mapped handle.
pub struct Mapped {
    pub handle: u64,
    pub va: u64,
    pub bytes: usize,
}

/// Creates a handle of `bytes` on device 0 and maps it.
pub fn create_mapped(d: &Driver, bytes: usize) -> anyhow::Result<Mapped> {
    let props = PoolProps::new(PINNED, DEVICE, 0);
    let mut m = Mapped { handle: 0, va: 0, bytes };
    // SAFETY: each symbol's C signature as the driver API declares it; the
    // out-parameters point to this frame's fields.
    unsafe {
        let create: unsafe extern "C" fn(*mut u64, usize, *const PoolProps, u64) -> R =
            d.sym("cuMemCreate")?;
        let reserve: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> R =
            d.sym("cuMemAddressReserve")?;
        let map: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> R = d.sym("cuMemMap")?;
        check(create(&mut m.handle, bytes, &props, 0), "cuMemCreate")?;
        check(reserve(&mut m.va, bytes, 0, 0, 0), "cuMemAddressReserve")?;
        check(map(m.va, bytes, 0, m.handle, 0), "cuMemMap")?;
    }
    Ok(m)
}

/// Unmaps and releases `m` (its memory goes at the release), and frees
/// its addresses.
pub fn unmap_release(d: &Driver, m: &Mapped) -> anyhow::Result<()> {
    // SAFETY: as in `create_mapped`.
    unsafe {
        let unmap: unsafe extern "C" fn(u64, usize) -> R = d.sym("cuMemUnmap")?;
        let release: unsafe extern "C" fn(u64) -> R = d.sym("cuMemRelease")?;
        let unreserve: unsafe extern "C" fn(u64, usize) -> R = d.sym("cuMemAddressFree")?;
        check(unmap(m.va, m.bytes), "cuMemUnmap")?;
        check(release(m.handle), "cuMemRelease")?;
        check(unreserve(m.va, m.bytes), "cuMemAddressFree")?;
    }
    Ok(())
}
