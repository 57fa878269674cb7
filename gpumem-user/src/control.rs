//! The agent's control socket: a root-only Unix socket that answers
//! `status` with the current usage table as JSON. One request per
//! connection: the client writes a command line, the agent writes one JSON
//! document and closes.
use std::{
    io,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{UnixListener, UnixStream},
    sync::{mpsc, oneshot},
};

pub const DEFAULT_SOCKET: &str = "/run/gpumem/gpumem.sock";
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Usage of one process or cgroup, as `status` reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct StatusEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    pub cgroup_id: u64,
    pub cgroup: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<crate::enrich::container::Container>,
    /// As the agent's ledger counts it.
    pub bytes: u64,
    /// As the kernel's map counts it (the truth; differs only if records
    /// were lost).
    pub kernel_bytes: u64,
    pub split: Vec<crate::output::SplitLine>,
}

/// The answer to `status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct StatusReport {
    pub libraries: Vec<String>,
    /// Devices as NVML describes them; empty without NVML.
    #[serde(default)]
    pub devices: Vec<crate::enrich::devices::DeviceInfo>,
    /// Whether NVML was loaded.
    #[serde(default)]
    pub nvml: bool,
    pub processes: Vec<StatusEntry>,
    pub cgroups: Vec<StatusEntry>,
    /// Records applied to the ledger so far.
    pub records: u64,
    /// Records lost in the kernel (ring buffer full) so far.
    pub dropped: u64,
    /// `alloc`/`free` records that reached the agent after the `exit` of
    /// the process image they belong to (already released with it).
    #[serde(default)]
    pub late_records: u64,
}

/// A request from a client, with where to send the answer.
pub type Request = (String, oneshot::Sender<String>);

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
}

/// Binds the socket (root-only) and serves requests into `tx` until the
/// returned task is aborted.
pub async fn serve(
    path: &Path,
    tx: mpsc::Sender<Request>,
) -> Result<tokio::task::JoinHandle<()>, ControlError> {
    let io_err = |source| ControlError::Io { path: path.to_path_buf(), source };
    if UnixStream::connect(path).await.is_ok() {
        return Err(ControlError::InUse(path.to_path_buf()));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    let listener = UnixListener::bind(path).map_err(io_err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io_err)?;
    Ok(tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                // A slow or broken client only loses its own answer.
                let _ = tokio::time::timeout(CLIENT_TIMEOUT, answer(stream, tx)).await;
            });
        }
    }))
}

async fn answer(stream: UnixStream, tx: mpsc::Sender<Request>) -> io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    let (reply_tx, reply_rx) = oneshot::channel();
    if tx.send((line.trim().to_string(), reply_tx)).await.is_err() {
        return Ok(()); // agent shutting down
    }
    if let Ok(reply) = reply_rx.await {
        write.write_all(reply.as_bytes()).await?;
    }
    write.shutdown().await
}

/// Sends `command` to the agent at `path` and returns its answer.
pub async fn request(path: &Path, command: &str) -> Result<String, ControlError> {
    let connect = |source| ControlError::Connect { path: path.to_path_buf(), source };
    let mut stream = UnixStream::connect(path).await.map_err(connect)?;
    stream.write_all(format!("{command}\n").as_bytes()).await.map_err(connect)?;
    let mut out = String::new();
    tokio::time::timeout(CLIENT_TIMEOUT, stream.read_to_string(&mut out))
        .await
        .map_err(|_| connect(io::Error::new(io::ErrorKind::TimedOut, "no answer within 5 s")))?
        .map_err(connect)?;
    Ok(out)
}

/// `status` as a typed report.
pub async fn status(path: &Path) -> Result<StatusReport, ControlError> {
    let text = request(path, "status").await?;
    serde_json::from_str(&text)
        .map_err(|e| ControlError::BadAnswer { path: path.to_path_buf(), detail: format!("{e}: {text}") })
}
