//! The programs, one module per CUDA API family (see
//! `gpumem_common::api`'s table for which symbol each serves).
//!
//! - `alloc`: allocation entries and the return every allocation shares;
//! - `array`, `vmm`: the array and virtual-memory entries;
//! - `pool`: memory pools' places, and allocations from them;
//! - `free`: frees (and what `vmm`'s release shares with them);
//! - `context`: contexts, hence the device of each thread's allocations;
//! - `report`: calls reported, never charged;
//! - `view`, `nvml`: memory queries answered with a limit's view;
//! - `exit`: process exit and exec, which release what a process held;
//! - `declare`: limits a process declares in its environment, read at
//!   exec and inherited at fork;
//! - `floor`: empty programs for the bench.
pub mod alloc;
pub mod array;
pub mod context;
pub mod declare;
pub mod exit;
pub mod floor;
pub mod free;
pub mod nvml;
pub mod pods;
pub mod pool;
pub mod report;
pub mod view;
pub mod vmm;
