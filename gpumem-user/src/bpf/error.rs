//! Why loading or attaching gpumem's eBPF object failed, and what to do.
use aya::{programs::ProgramError, EbpfError};

use super::symbols::SymbolError;

#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error(
        "this gpumem was built without its eBPF object (bpf-linker was missing or AYA_BUILD_SKIP was set); \
         run `cargo xtask build` to build a working agent"
    )]
    NoObject,
    #[error("loading the eBPF object failed")]
    Load(#[source] Box<EbpfError>),
    #[error(
        "the eBPF object has no program `{0}` (the object and the agent were built from different sources)"
    )]
    MissingProgram(&'static str),
    #[error("loading eBPF program `{name}` failed (gpumem needs kernel 5.15 or newer with uprobes)")]
    Program { name: &'static str, source: Box<ProgramError> },
    #[error("attaching the raw tracepoint {tracepoint} failed")]
    Tracepoint { tracepoint: &'static str, source: Box<ProgramError> },
    #[error(transparent)]
    Symbols(#[from] SymbolError),
    #[error(
        "{path} lacks required driver symbol(s) {symbols}: it is not a CUDA driver library gpumem supports; \
         point --libcuda at the real libcuda.so.1"
    )]
    MissingRequired { path: String, symbols: String },
    #[error("attaching `{program}` to {symbol} in {path} failed")]
    Attach { program: &'static str, symbol: &'static str, path: String, source: Box<ProgramError> },
    #[error("the eBPF object has no map `{0}`")]
    MissingMap(&'static str),
    #[error("opening the eBPF programs' log (--bpf-log) failed")]
    Log(#[source] Box<aya_log::Error>),
    #[error("opening map `{name}` failed")]
    Map { name: &'static str, source: Box<aya::maps::MapError> },
    #[error("keeping gpumem's state in the kernel (--persist) failed: {0}")]
    Persist(String),
    #[error("multi-uprobe links: {0}")]
    Multi(String),
    #[error(transparent)]
    Pins(#[from] super::persist::PersistError),
    #[error("handing the kernel side between builds: {0}")]
    Handover(String),
}
