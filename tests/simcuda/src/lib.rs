//! A simulated CUDA driver: `libcuda.so.1` with the real driver API's
//! symbols, versioned names, signatures and CUresult codes, backed by a
//! bookkeeping "card" instead of a GPU.
//!
//! It is a test fixture and the demo's stand-in GPU, never part of the
//! agent. Each device has a capacity (`SIMCUDA_CAPACITY` bytes, default
//! 16 GiB; `SIMCUDA_DEVICES` devices, default 2) and allocations beyond it
//! fail with `CUDA_ERROR_OUT_OF_MEMORY` as a full card would. Capacity is
//! per process: the simulation keeps no state shared between processes.
//!
//! Every exported function has its own body (they call shared helpers with
//! different arguments), so no two exports are folded to one address:
//! uprobes on two symbols must mean two functions, as in the real driver.
#![allow(non_snake_case, clippy::missing_safety_doc)]

pub mod array;
pub mod context;
pub mod cuda;
pub mod device;
pub mod exports;
pub mod host;
pub mod memory;
pub mod procaddr;
pub mod state;
pub mod stream;
pub mod vmm;
