//! gpumem's privileged end-to-end tests, in one binary: each module is a
//! suite. Each test starts the real agent on the simulated driver, runs
//! workloads in cgroups it makes, and compares the agent's and the
//! kernel's numbers with the workloads' own ground truth, exactly. Run
//! them as root with one test thread (`cargo xtask test` does); the kernel
//! matrix runs the `concurrency`, `declared` (with `declared_containers`),
//! `limits`, `links`, `persist`, `pod_rules`, `trace_exact` and `view`
//! suites inside its VMs.
// The suites share the test crate's dependencies; not every one uses each.
#![allow(unused_crate_dependencies)]

mod agent_cli;
mod attribution;
mod concurrency;
mod containers;
mod control_flood;
mod coverage;
mod cuda_bindings;
mod daemonset;
mod daemonset_upgrade;
mod declared;
mod declared_containers;
mod faults;
mod forensics;
mod frameworks;
mod gpu_kit;
mod host_changes;
mod idle;
mod libraries;
mod limit_changes;
mod limits;
mod links;
mod live_table;
mod metrics;
mod nvidia;
mod persist;
mod pod_rules;
mod soak;
mod top;
mod trace_exact;
mod view;
