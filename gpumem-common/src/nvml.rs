//! NVIDIA's management library, as the view sees it: the layouts of
//! `nvmlMemory_t` and `nvmlMemory_v2_t`, and which device each of a
//! process's NVML handles is. An `nvmlDevice_t` is an opaque pointer of
//! the process's own, so the kernel learns it where the process asked for
//! it by index (`nvmlDeviceGetHandleByIndex[_v2]`) and keeps it in one
//! [`NvmlHandles`] value per process (`PROC_NVML`, keyed by tgid), removed
//! when the process exits or execs.

/// Devices whose handles are remembered per process; a handle of a device
/// past these (or got another way: by UUID, by PCI bus id) is of an
/// unknown device, which only limits on every device apply to.
pub const NVML_DEVICES: usize = 16;

/// Processes with NVML handles at once.
pub const NVML_PROC_ENTRIES: u32 = 4096;

/// `NVML_SUCCESS`.
pub const NVML_SUCCESS: u32 = 0;

/// Offsets of the figures in `nvmlMemory_t { total, free, used }`.
pub mod v1 {
    pub const TOTAL: u64 = 0;
    pub const FREE: u64 = 8;
    pub const USED: u64 = 16;
}

/// Offsets in `nvmlMemory_v2_t { version (u32, padded), total, reserved,
/// free, used }`.
pub mod v2 {
    pub const TOTAL: u64 = 8;
    pub const RESERVED: u64 = 16;
    pub const FREE: u64 = 24;
    pub const USED: u64 = 32;
}

/// One process's NVML handles: `handles[i]` is device `i`'s (0: not
/// learned). The kernel writes a slot itself, its index masked where it
/// is used.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmlHandles {
    pub handles: [u64; NVML_DEVICES],
}

impl NvmlHandles {
    /// The device whose handle is `handle`, if learned.
    #[inline(always)]
    pub fn device(&self, handle: u64) -> Option<u32> {
        if handle == 0 {
            return None;
        }
        let mut i = 0;
        while i < NVML_DEVICES {
            if self.handles[i] == handle {
                return Some(i as u32);
            }
            i += 1;
        }
        None
    }
}

#[cfg(feature = "user")]
// SAFETY: repr(C), integers only, no padding.
unsafe impl aya::Pod for NvmlHandles {}

const _: () = assert!(core::mem::size_of::<NvmlHandles>() == 8 * NVML_DEVICES);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_learned_handle_names_its_device_and_others_none() {
        let mut h = NvmlHandles::default();
        (h.handles[0], h.handles[3]) = (0xa0, 0xd0);
        assert_eq!((h.device(0xa0), h.device(0xd0)), (Some(0), Some(3)));
        assert_eq!((h.device(0xb0), h.device(0)), (None, None), "unknown, and 0 is never a handle");
        h.handles[0] = 0xa8;
        assert_eq!((h.device(0xa8), h.device(0xa0)), (Some(0), None), "learned again, the old is gone");
    }
}
