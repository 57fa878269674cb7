//! Accounting: what each process, cgroup and limit holds, and the calls in
//! flight between their entries and returns. Built on `base`; the limit
//! decision (`limits.rs`) and the API families build on this.
//!
//! - `usage`: charging and uncharging process and cgroup totals;
//! - `held`: a process's per-cgroup and per-limit amounts, and its release
//!   racing its own charges and frees;
//! - `limit_usage`: bytes reserved and held under each limit;
//! - `live`: each live allocation, from its charge to its free;
//! - `pending`: calls in flight;
//! - `declared`: a process's own declared limits, as the decision and the
//!   accounting see them.
pub mod declared;
pub mod held;
pub mod limit_usage;
pub mod live;
pub mod pending;
pub mod usage;
