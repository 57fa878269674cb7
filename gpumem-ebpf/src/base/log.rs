//! Diagnostics an operator turns on when something looks wrong (`gpumem
//! run --bpf-log`): limit decisions, deny rewrites, skipped runs and full
//! maps, logged from the programs through aya-log's ring buffer.
//!
//! The object is built twice (see gpumem-user's build.rs): without the
//! `log` feature every log statement is compiled out, and that object is
//! what the agent loads unless `--bpf-log` asks for the one built with it.
//! So logging off costs exactly nothing: the programs, the instructions
//! the verifier processes and their stack are those of an object without
//! logging. (A read-only flag the verifier prunes was measured first: each
//! gate is still a load and a branch on every path the verifier walks,
//! 159k -> 167k instructions processed with the flag off, and the log
//! statements' stack slots stay in every program.)

/// Whether this object logs (`--bpf-log`).
pub const ENABLED: bool = cfg!(feature = "log");

/// aya-log's `info!`, in the logging object only (elsewhere its arguments
/// are only named, so values computed for a log line are not unused).
macro_rules! log_info {
    ($($args:tt)*) => {{
        #[cfg(feature = "log")]
        aya_log_ebpf::info!($($args)*);
        #[cfg(not(feature = "log"))]
        let _ = ($($args)*);
    }};
}

/// aya-log's `warn!`, as [`log_info!`].
macro_rules! log_warn {
    ($($args:tt)*) => {{
        #[cfg(feature = "log")]
        aya_log_ebpf::warn!($($args)*);
        #[cfg(not(feature = "log"))]
        let _ = ($($args)*);
    }};
}

pub(crate) use {log_info, log_warn};
