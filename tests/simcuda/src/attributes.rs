//! What a device says about itself: `cuDeviceGetAttribute` (a plausible
//! Hopper-class card: compute capability 9.0, unified addressing, memory
//! pools, virtual memory management), `cuDeviceGetUuid[_v2]` (the same UUID
//! the simulated NVML gives) and `cuDeviceGetPCIBusId`.
use std::ffi::{c_char, c_int};

use crate::{
    cuda::{CUdevice, CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS},
    state,
};

/// The highest `CUdevice_attribute` this driver knows (CUDA 13's last).
const LAST_ATTRIBUTE: c_int = 160;

/// The card's attributes that are not 0 (0: not supported / none), by
/// `CUdevice_attribute` number.
const ATTRIBUTES: &[(c_int, c_int)] = &[
    (1, 1024),          // max threads per block
    (2, 1024),          // max block dim x
    (3, 1024),          // max block dim y
    (4, 64),            // max block dim z
    (5, i32::MAX),      // max grid dim x
    (6, 65535),         // max grid dim y
    (7, 65535),         // max grid dim z
    (8, 49152),         // shared memory per block
    (9, 65536),         // constant memory
    (10, 32),           // warp size
    (11, i32::MAX),     // max pitch
    (12, 65536),        // registers per block
    (13, 1_980_000),    // clock rate, kHz
    (14, 512),          // texture alignment
    (15, 1),            // gpu overlap
    (16, 132),          // multiprocessors
    (19, 1),            // can map host memory
    (30, 512),          // surface alignment
    (31, 1),            // concurrent kernels
    (32, 1),            // ECC enabled
    (36, 2_619_000),    // memory clock rate, kHz
    (37, 5120),         // memory bus width
    (38, 52_428_800),   // L2 cache size
    (39, 2048),         // max threads per multiprocessor
    (40, 3),            // async engines
    (41, 1),            // unified addressing
    (51, 32),           // texture pitch alignment
    (75, 9),            // compute capability major
    (76, 0),            // compute capability minor
    (78, 1),            // stream priorities
    (79, 1),            // global L1 cache
    (80, 1),            // local L1 cache
    (81, 233_472),      // shared memory per multiprocessor
    (82, 65536),        // registers per multiprocessor
    (83, 1),            // managed memory
    (86, 0),            // host native atomics
    (89, 1),            // concurrent managed access
    (90, 1),            // compute preemption
    (91, 1),            // host pointer for registered memory
    (95, 1),            // cooperative launch
    (97, 232_448),      // shared memory per block, opt-in
    (99, 1),            // host register supported
    (102, 1),           // virtual memory management
    (103, 1),           // POSIX file descriptor handles
    (106, 32),          // blocks per multiprocessor
    (108, 32_505_856),  // persisting L2 size
    (109, 134_213_632), // access policy window
    (113, 1),           // read-only host register
    (115, 1),           // memory pools supported
    (119, 1),           // mempool handle types: POSIX fd
    (120, 1),           // cluster launch
    (122, 1),           // 64-bit stream mem ops
    (124, 1),           // dma-buf
    (126, 4),           // memory sync domains
    (127, 1),           // tensor map access
    (132, 1),           // multicast supported
    (144, 1),           // host memory pools
    (145, 1),           // host virtual memory management
];

/// Device `dev`'s attribute `attr`, or why not.
pub fn attribute(attr: c_int, dev: CUdevice) -> Result<c_int, CUresult> {
    state::check_device(dev)?;
    match attr {
        33 => Ok(dev + 1), // PCI bus: one per device
        34 | 50 => Ok(0),  // PCI device, domain
        1..=LAST_ATTRIBUTE => Ok(ATTRIBUTES.iter().find(|(a, _)| *a == attr).map_or(0, |(_, v)| *v)),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

pub unsafe extern "C" fn cuDeviceGetAttribute(pi: *mut c_int, attrib: c_int, dev: CUdevice) -> CUresult {
    if pi.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { crate::cuda::hand_out(pi, attribute(attrib, dev)) }
}

/// The 16 bytes of device `dev`'s UUID (NVML's text form's hex digits).
pub fn uuid(dev: CUdevice) -> [u8; 16] {
    let text = simcard::device_uuid(dev as u32);
    let hex: Vec<u8> = text.trim_start_matches("GPU-").bytes().filter(u8::is_ascii_hexdigit).collect();
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).take(16).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(pair).unwrap_or("0"), 16).unwrap_or(0);
    }
    out
}

unsafe fn write_uuid(out: *mut [u8; 16], dev: CUdevice, how: u32) -> CUresult {
    let _ = std::hint::black_box(how);
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { crate::cuda::hand_out(out, state::check_device(dev).map(|()| uuid(dev))) }
}

pub unsafe extern "C" fn cuDeviceGetUuid(out: *mut [u8; 16], dev: CUdevice) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { write_uuid(out, dev, 1) }
}

pub unsafe extern "C" fn cuDeviceGetUuid_v2(out: *mut [u8; 16], dev: CUdevice) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { write_uuid(out, dev, 2) }
}

/// `0000:BB:00.0` (13 bytes with the NUL, what callers pass), the bus
/// being the device's number + 1.
pub unsafe extern "C" fn cuDeviceGetPCIBusId(out: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    if out.is_null() || len < 13 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if let Err(e) = state::check_device(dev) {
        return e;
    }
    let text = format!("0000:{:02X}:00.0\0", dev + 1);
    let n = text.len().min(len as usize);
    // SAFETY: `out` holds `len` bytes (the driver API's contract), `n <= len`.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr().cast(), out, n) };
    // SAFETY: as above; the last byte written is within `len`.
    unsafe { *out.add(n - 1) = 0 };
    CUDA_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_uuid_is_nvmls_hex_digits() {
        assert_eq!(uuid(3), [0x51, 0x57, 0xc0, 0xda, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 3]);
    }

    #[test]
    fn the_attribute_table_is_sorted_and_in_range() {
        assert!(ATTRIBUTES.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(ATTRIBUTES.iter().all(|(a, _)| (1..=LAST_ATTRIBUTE).contains(a)));
    }
}
