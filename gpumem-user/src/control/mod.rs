//! The agent's control socket: a root-only Unix socket over which
//! `gpumem status` and `gpumem limit` talk to the running agent, one JSON
//! line each way (`protocol`). `server` accepts connections and hands each
//! request to the event loop; `client` is the other end.
pub mod client;
pub mod protocol;
pub mod server;

use std::{io, path::PathBuf, time::Duration};

pub use client::{request, status};
pub use protocol::{Request, Response};
pub use server::{serve, Incoming};

/// Where the agent listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/gpumem/gpumem.sock";
/// How long either side waits for the other.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request line the agent reads.
const MAX_LINE: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("another gpumem agent is already answering on {0}; stop it or pass --socket PATH")]
    InUse(PathBuf),
    #[error("control socket {path}")]
    Io { path: PathBuf, source: io::Error },
    #[error("cannot reach the gpumem agent at {path} (is `gpumem run` running, and are you root?)")]
    Connect { path: PathBuf, source: io::Error },
    #[error("the agent at {path} sent an answer gpumem cannot read: {detail}")]
    BadAnswer { path: PathBuf, detail: String },
    #[error("the agent refused: {0}")]
    Refused(String),
}
