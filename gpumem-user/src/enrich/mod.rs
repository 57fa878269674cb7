//! Enrichment: what the kernel record does not carry (the cgroup's path).
pub mod cgroup;
