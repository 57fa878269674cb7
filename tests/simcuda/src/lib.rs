//! A simulated CUDA driver: `libcuda.so.1` with the real driver API's
//! symbols, versioned names, signatures and CUresult codes, backed by a
//! bookkeeping "card" instead of a GPU.
//!
//! It is a test fixture and the demo's stand-in GPU, never part of the
//! agent. The card is shared by every process on the host, as a real one
//! is (`simcard`: a file every process maps, `SIMCUDA_CARD`, default
//! `/dev/shm/simcuda-card`): each device has a capacity (`SIMCUDA_CAPACITY`
//! bytes, default 16 GiB; `SIMCUDA_DEVICES` devices, default 2; both read
//! when a card no running process uses is made), allocations beyond what
//! all processes hold fail with `CUDA_ERROR_OUT_OF_MEMORY` as a full card
//! would, each context costs the card `SIMCUDA_CONTEXT_COST` bytes
//! (default 2 MiB) of its own, and a process that exits gives its memory
//! back. The simulated NVML (`tests/simnvml`) reads the same card.
//!
//! Every exported function has its own body (they call shared helpers with
//! different arguments), so no two exports are folded to one address:
//! uprobes on two symbols must mean two functions, as in the real driver.
#![allow(non_snake_case, clippy::missing_safety_doc)]

pub mod array;
pub mod async_alloc;
pub mod attributes;
pub mod backing;
pub mod context;
pub mod copy;
pub mod cuda;
pub mod device;
pub mod errors;
pub mod exports;
pub mod hold;
pub mod host;
pub mod memory;
pub mod multicast;
pub mod pool;
pub mod pool_attributes;
pub mod pool_stats;
pub mod procaddr;
pub mod state;
pub mod streams;
pub mod vmm;
