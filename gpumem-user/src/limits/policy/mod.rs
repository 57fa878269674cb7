//! Limits as the user states them: parsing, validation, defaults. Pure
//! logic; the decision itself is made in the kernel at the allocation
//! (gpumem-ebpf's limits.rs), from the rules this module produces.
pub mod config;
pub mod env;
pub mod error;
pub mod kube;
pub mod rule_text;
pub mod size;
pub mod spec;

pub use error::SpecError;
pub use spec::{Action, Limit, Target, View};
