//! gpumem's test support: the workload generator's parts (`driver`,
//! `truth`) and the harness the privileged end-to-end tests use
//! (`harness`).
pub mod driver;
pub mod families;
pub mod harness;
pub mod mixed;
pub mod truth;
