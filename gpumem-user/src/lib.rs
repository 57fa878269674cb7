//! gpumem's agent as a library: the binary (`main.rs`) is a thin CLI over
//! these modules, and the integration tests use the control client.
//!
//! Data flow: `bpf` (load, attach, kernel maps) -> ring buffer -> `agent`
//! (decode, `enrich`, `ledger`) -> `output` lines -> `sink`. `control`
//! serves `gpumem status`.
pub mod agent;
pub mod bpf;
pub mod carried;
pub mod cli;
pub mod cmd;
pub mod control;
pub mod enrich;
pub mod ledger;
pub mod output;
pub mod policy;
pub mod privileges;
pub mod sink;
