//! The client's end of the control socket (`gpumem status`, `gpumem top`,
//! `gpumem limit`).
use std::path::Path;

use futures_util::{SinkExt, StreamExt};
use tokio::net::UnixStream;
use tokio_util::codec::{Framed, LinesCodec};

use super::{
    protocol::{Request, Response},
    socket::{ControlError, TIMEOUT},
};
use crate::output::{StatusReport, TopReport};

/// Sends `request` to the agent at `path` and returns its answer (an
/// error answer as [`ControlError::Refused`]).
pub async fn request(path: &Path, request: &Request) -> Result<Response, ControlError> {
    let connect = |source| ControlError::Connect { path: path.to_path_buf(), source };
    let bad = |detail: String| ControlError::BadAnswer { path: path.to_path_buf(), detail };
    let stream = UnixStream::connect(path).await.map_err(connect)?;
    let mut lines = Framed::new(stream, LinesCodec::new());
    let text = serde_json::to_string(request).map_err(|e| bad(e.to_string()))?;
    lines.send(text).await.map_err(|e| bad(e.to_string()))?;
    let answer = tokio::time::timeout(TIMEOUT, lines.next())
        .await
        .map_err(|_| bad("no answer within 5 s".into()))?
        .ok_or_else(|| bad("the agent closed the connection without an answer".into()))?
        .map_err(|e| bad(e.to_string()))?;
    match serde_json::from_str(&answer).map_err(|e| bad(format!("{e}: {answer}")))? {
        Response::Error(why) => Err(ControlError::Refused(why)),
        other => Ok(other),
    }
}

/// `status` as a typed report.
pub async fn status(path: &Path) -> Result<StatusReport, ControlError> {
    match request(path, &Request::Status).await? {
        Response::Status(report) => Ok(*report),
        other => Err(ControlError::BadAnswer { path: path.to_path_buf(), detail: format!("{other:?}") }),
    }
}

/// `top` as a typed report.
pub async fn top(path: &Path) -> Result<TopReport, ControlError> {
    match request(path, &Request::Top).await? {
        Response::Top(report) => Ok(*report),
        other => Err(ControlError::BadAnswer { path: path.to_path_buf(), detail: format!("{other:?}") }),
    }
}
