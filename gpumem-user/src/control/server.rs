//! The agent's end of the control socket: accepts connections (root-only
//! socket file), reads request lines, hands each to the event loop with a
//! channel for its answer, and writes the answer back. A slow or broken
//! client loses only its own answers; a line that is not a request is
//! answered with an error; a client beyond [`MAX_CLIENTS`] is told the
//! agent is busy and closed.
use std::{os::unix::fs::PermissionsExt, path::Path, sync::Arc};

use futures_util::{SinkExt, StreamExt};
use tokio::{
    net::{UnixListener, UnixStream},
    sync::{mpsc, oneshot, Semaphore},
};
use tokio_util::codec::{Framed, LinesCodec};

use super::{
    protocol::{Request, Response},
    socket::{ControlError, ACCEPT_BACKOFF, MAX_CLIENTS, MAX_LINE, TIMEOUT},
};

/// A request from a client, with where to send the answer.
pub type Incoming = (Request, oneshot::Sender<Response>);

/// Binds the socket (root-only) and serves requests into `tx` until the
/// returned task is aborted.
pub async fn serve(
    path: &Path,
    tx: mpsc::Sender<Incoming>,
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
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    let listener = UnixListener::bind(path).map_err(io_err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io_err)?;
    let clients = Arc::new(Semaphore::new(MAX_CLIENTS));
    Ok(tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                // Out of descriptors (or a client gone before it was
                // accepted): wait for clients to close before trying again.
                Err(_) => {
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            match clients.clone().try_acquire_owned() {
                Ok(permit) => {
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        converse(stream, tx).await;
                        drop(permit);
                    });
                }
                Err(_) => {
                    tokio::spawn(turn_away(stream));
                }
            }
        }
    }))
}

/// Tells a client beyond [`MAX_CLIENTS`] why it is not served.
async fn turn_away(stream: UnixStream) {
    let mut lines = Framed::new(stream, LinesCodec::new_with_max_length(MAX_LINE));
    let busy = format!(
        "the agent is serving {MAX_CLIENTS} clients, as many as it serves at once; try again when one has closed"
    );
    let _ = send(&mut lines, &Response::Error(busy)).await;
}

/// Answers one client's requests until it closes, stalls or the agent
/// stops.
async fn converse(stream: UnixStream, tx: mpsc::Sender<Incoming>) {
    let mut lines = Framed::new(stream, LinesCodec::new_with_max_length(MAX_LINE));
    loop {
        let line = match tokio::time::timeout(TIMEOUT, lines.next()).await {
            Ok(Some(Ok(line))) => line,
            Ok(Some(Err(e))) => {
                // Too long, or not text: said, then the connection ends.
                let _ = send(&mut lines, &Response::Error(format!("unreadable request: {e}"))).await;
                return;
            }
            _ => return,
        };
        let answer = match serde_json::from_str::<Request>(&line) {
            Ok(request) => {
                let (reply, answer) = oneshot::channel();
                if tx.send((request, reply)).await.is_err() {
                    return; // the agent is stopping
                }
                match answer.await {
                    Ok(a) => a,
                    Err(_) => return,
                }
            }
            Err(e) => Response::Error(format!(
                "`{}` is not a request this agent knows ({e}); see gpumem's control protocol",
                line.chars().take(80).collect::<String>()
            )),
        };
        if send(&mut lines, &answer).await.is_err() {
            return;
        }
    }
}

async fn send(lines: &mut Framed<UnixStream, LinesCodec>, r: &Response) -> Result<(), ()> {
    let text = serde_json::to_string(r).map_err(|_| ())?;
    tokio::time::timeout(TIMEOUT, lines.send(text)).await.map_err(|_| ())?.map_err(|_| ())
}
