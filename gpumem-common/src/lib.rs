//! Wire types shared by the eBPF programs (`gpumem-ebpf`) and the agent
//! (`gpumem-user`).
//!
//! Only fixed-width integers and arrays cross the kernel/user boundary: no
//! `bool`, `enum`, `Option` or padding holes, so both sides agree on every
//! byte whatever the compiler does. Every struct here is `#[repr(C)]` and its
//! size is checked at compile time.
#![no_std]

pub mod api;
pub mod event;
pub mod limit_list;
pub mod maps;

pub use api::*;
pub use event::*;
pub use maps::*;

/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: u32 = 0;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;
