//! The agent's control socket: a root-only Unix socket over which
//! `gpumem status`, `gpumem top` and `gpumem limit` talk to the running
//! agent, one JSON line each way (`protocol`). `server` accepts
//! connections and hands each request to the event loop; `client` is the
//! other end; `lock` keeps a second agent off a socket in use; `socket`
//! holds what both ends share (the default path, time-outs, errors).
pub mod client;
pub mod lock;
pub mod protocol;
pub mod server;
pub mod socket;

pub use client::{request, status, top};
pub use protocol::{Request, Response};
pub use server::{serve, Incoming};
pub use socket::{ControlError, DEFAULT_SOCKET};
