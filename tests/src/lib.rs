//! gpumem's test support: the workload generator's parts (`driver`,
//! `truth`) and the harness the privileged end-to-end tests use
//! (`harness`).
// The workload generator (a bin) and the end-to-end tests share this
// crate's dependencies; the library itself uses only some of them.
#![allow(unused_crate_dependencies)]

pub mod bench_loop;
#[cfg(test)]
mod deploy;
#[cfg(test)]
mod docs;
pub mod driver;
pub mod failed_frees;
pub mod families;
pub mod harness;
pub mod hold;
pub mod mixed;
pub mod multicast;
pub mod no_device;
pub mod pace;
pub mod pools;
pub mod threads;
pub mod truth;
pub mod view;
pub mod view_nvml;
