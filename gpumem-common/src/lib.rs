//! Wire types shared by the eBPF programs (`gpumem-ebpf`) and the agent
//! (`gpumem-user`).
//!
//! Only fixed-width integers and arrays cross the kernel/user boundary: no
//! `bool`, `enum`, `Option` or padding holes, so both sides agree on every
//! byte whatever the compiler does. Every struct here is `#[repr(C)]` and its
//! size is checked at compile time. The tables (`api`, `program`) are
//! constants both sides compile in; they never cross the boundary.
//!
//! - `api`: the table of CUDA entry points (ids, symbols, families, shapes);
//! - `program`: the uprobe programs and their guard indexes;
//! - `cookie`: what a probe's attach cookie carries;
//! - `handover`: which build's programs run, for a takeover;
//! - `record`: the ring-buffer records (header and payloads);
//! - `pending`: what a call keeps between its entry and its return;
//! - `pool`: where a memory pool's allocations are charged;
//! - `nvml`: NVML's memory layouts and each process's device handles;
//! - `maps`: the other map keys and values, map names and sizes
//!   (`limit_maps`: the limit maps');
//! - `limit_list`, `array`, `text`: arithmetic both sides share.
//!
//! The root re-exports the wire types for the other crates; inside this
//! crate every module names the module it uses.
#![no_std]

#[cfg(test)]
extern crate std;

pub mod api;
pub mod array;
pub mod cookie;
pub mod declare;
pub mod handover;
pub mod kind;
pub mod limit_list;
pub mod limit_maps;
pub mod live_table;
pub mod maps;
pub mod nvml;
pub mod pending;
pub mod pool;
pub mod program;
pub mod record;
pub mod text;

pub use api::id;
pub use live_table::*;
pub use maps::*;
pub use pending::*;
pub use record::*;

pub use text::str_eq;

/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: u32 = 0;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;
