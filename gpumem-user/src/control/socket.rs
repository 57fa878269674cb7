//! What both ends of the control socket share: where it is, how long each
//! side waits, and what can go wrong.
use std::{io, path::PathBuf, time::Duration};

/// Where the agent listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/gpumem/gpumem.sock";
/// How long either side waits for the other.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request line the agent reads.
pub const MAX_LINE: usize = 64 * 1024;
/// Clients the agent serves at once; one more is told so and closed (each
/// holds a file descriptor and a task until it closes or stalls).
pub const MAX_CLIENTS: usize = 32;
/// How long the agent waits before accepting again after accept failed
/// (out of file descriptors: retrying at once would spin a core).
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("another gpumem agent is already answering on {0}; stop it or pass --socket PATH")]
    InUse(PathBuf),
    #[error(
        "another gpumem agent ({holder}) holds {lock}: it runs, starts or detaches on this control socket; \
         stop it first (SIGTERM), or give this agent its own --socket PATH"
    )]
    Locked { lock: PathBuf, holder: String },
    #[error("control socket {path}")]
    Io { path: PathBuf, source: io::Error },
    #[error("cannot reach the gpumem agent at {path} (is `gpumem run` running, and are you root?)")]
    Connect { path: PathBuf, source: io::Error },
    #[error("the agent at {path} sent an answer gpumem cannot read: {detail}")]
    BadAnswer { path: PathBuf, detail: String },
    #[error("the agent refused: {0}")]
    Refused(String),
}
