//! CUDA arrays, sized from their descriptors (only the integer and float
//! formats; others are refused with CUDA_ERROR_INVALID_VALUE).
use std::{collections::HashMap, sync::Mutex};

use crate::{
    cuda::{CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS},
    state,
};

#[repr(C)]
pub struct ArrayDescriptor {
    pub width: usize,
    pub height: usize,
    pub format: u32,
    pub channels: u32,
}

#[repr(C)]
pub struct Array3DDescriptor {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub format: u32,
    pub channels: u32,
    pub flags: u32,
}

/// handle -> (device, bytes)
static ARRAYS: Mutex<Option<HashMap<u64, (i32, u64)>>> = Mutex::new(None);

fn element_bytes(format: u32, channels: u32) -> Option<u64> {
    let b = match format {
        0x01 | 0x08 => 1,
        0x02 | 0x09 | 0x10 => 2,
        0x03 | 0x0a | 0x20 => 4,
        _ => return None,
    };
    matches!(channels, 1 | 2 | 4).then_some(b * channels as u64)
}

/// Bytes of a `levels`-level array, each level halving every extent.
fn array_bytes(extent: [usize; 3], format: u32, channels: u32, levels: u32) -> Option<u64> {
    let per = element_bytes(format, channels)?;
    let mut e = extent.map(|v| v.max(1) as u64);
    let mut total = 0;
    for _ in 0..levels.max(1) {
        total += e[0] * e[1] * e[2] * per;
        e = e.map(|v| (v / 2).max(1));
    }
    Some(total)
}

unsafe fn create(out: *mut u64, bytes: Option<u64>) -> CUresult {
    let Some(bytes) = bytes.filter(|_| !out.is_null()) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    let (dev, mut card) = match crate::context::current_card() {
        Ok(x) => x,
        Err(e) => return e,
    };
    if !card.reserve(dev, bytes) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    let h = card.handle();
    ARRAYS.lock().unwrap().get_or_insert_with(HashMap::new).insert(h, (dev, bytes));
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *out = h };
    CUDA_SUCCESS
}

fn destroy(handle: u64) -> CUresult {
    let Some((dev, bytes)) = ARRAYS.lock().unwrap().get_or_insert_with(HashMap::new).remove(&handle) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    if let Ok(mut card) = state::card() {
        card.unreserve(dev, bytes);
    }
    CUDA_SUCCESS
}

pub unsafe extern "C" fn cuArrayCreate_v2(out: *mut u64, desc: *const ArrayDescriptor) -> CUresult {
    let bytes =
        // SAFETY: the caller's descriptor, valid or null by the driver API's contract.
        unsafe { desc.as_ref() }.and_then(|d| array_bytes([d.width, d.height, 1], d.format, d.channels, 1));
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { create(out, bytes) }
}

pub unsafe extern "C" fn cuArray3DCreate_v2(out: *mut u64, desc: *const Array3DDescriptor) -> CUresult {
    // SAFETY: the caller's descriptor, valid or null by the driver API's contract.
    let bytes = unsafe { desc.as_ref() }
        .and_then(|d| array_bytes([d.width, d.height, d.depth], d.format, d.channels, 1));
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { create(out, bytes) }
}

pub unsafe extern "C" fn cuMipmappedArrayCreate(
    out: *mut u64,
    desc: *const Array3DDescriptor,
    levels: u32,
) -> CUresult {
    // SAFETY: the caller's descriptor, valid or null by the driver API's contract.
    let bytes = unsafe { desc.as_ref() }
        .and_then(|d| array_bytes([d.width, d.height, d.depth], d.format, d.channels, levels));
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { create(out, bytes) }
}

pub extern "C" fn cuArrayDestroy(handle: u64) -> CUresult {
    destroy(handle)
}

pub extern "C" fn cuMipmappedArrayDestroy(handle: u64) -> CUresult {
    let r = destroy(handle);
    std::hint::black_box(r)
}
