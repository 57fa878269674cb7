//! Limits a workload declares in its own environment (`GPUMEM_LIMIT`,
//! HAMi's `CUDA_DEVICE_MEMORY_LIMIT[_i]`, NVIDIA's
//! `NVIDIA_GPU_MEMORY_LIMIT`, KAI's `GPU_MEMORY_LIMIT`), read by the
//! kernel at exec and by the agent for processes already running, with
//! the same code.
//!
//! Every parser here reads one byte at a time into a state of plain
//! integers whose zero value is the start: the kernel keeps the state in
//! a map and feeds it from a `bpf_loop` callback, which the verifier
//! walks once instead of once per byte. The agent's `--limit`, its limits
//! file and its sizes use the same parsers, so a rule reads the same
//! wherever it is written.
pub mod action;
pub mod chars;
pub mod declaration;
pub mod declared;
pub mod hami;
pub mod mib;
pub mod names;
pub mod read;
pub mod rule;
pub mod signal;
pub mod size;
pub mod word;

/// The most bytes of one environment string (`NAME=value` and its NUL)
/// the kernel reads; a longer `GPUMEM_LIMIT` is refused as too long.
pub const CAP: usize = 256;
