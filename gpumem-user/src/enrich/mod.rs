//! Enrichment: what the kernel record does not carry: the cgroup's path,
//! the container and pod it names, the process's executable and command
//! line.
pub mod cgroup;
pub mod container;
pub mod devices;
pub mod process;
