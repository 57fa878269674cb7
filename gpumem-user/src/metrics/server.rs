//! The metrics' HTTP end: `GET /metrics` on `--metrics ADDR:PORT`
//! (HTTP/1.1, hyper). Each scrape asks the event loop for the page (the
//! loop owns the agent's state: no locks), so a scrape taken after a
//! workload's calls returned includes them. Nothing else is served; a slow
//! client is cut off after a few seconds and costs only its own connection.
use std::{convert::Infallible, net::SocketAddr, time::Duration};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    body::Incoming,
    header::{ALLOW, CONTENT_TYPE},
    server::conn::http1,
    service::service_fn,
    Method, Request, Response, StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::TcpListener,
    sync::{mpsc, oneshot},
    task::JoinHandle,
};

/// A scrape's request to the event loop: where to send the page (or why
/// there is none).
pub type ScrapeRequest = oneshot::Sender<Result<String, String>>;

/// OpenMetrics 1.0 text, what the page is written in.
const CONTENT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// How long a client may take to send its request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
#[error(
    "serving metrics on {addr}: {source}; pick a free address and port for --metrics (e.g. 127.0.0.1:9400)"
)]
pub struct MetricsError {
    addr: SocketAddr,
    source: std::io::Error,
}

/// Binds `addr` and serves scrapes into `tx` until the returned task is
/// aborted; also returns the address bound (the port, where 0 was asked).
pub async fn serve(
    addr: SocketAddr,
    tx: mpsc::Sender<ScrapeRequest>,
) -> Result<(JoinHandle<()>, SocketAddr), MetricsError> {
    let err = |source| MetricsError { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(err)?;
    let bound = listener.local_addr().map_err(err)?;
    let task = tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: wait, then try again.
                    tracing::warn!("metrics: accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| answer(req, tx.clone()));
                let _ = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((task, bound))
}

fn reply(status: StatusCode, text: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(text.into()));
    *r.status_mut() = status;
    r
}

async fn answer(
    req: Request<Incoming>,
    tx: mpsc::Sender<ScrapeRequest>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.uri().path() != "/metrics" {
        return Ok(reply(StatusCode::NOT_FOUND, "gpumem serves its metrics at /metrics\n"));
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let mut r = reply(StatusCode::METHOD_NOT_ALLOWED, "/metrics answers GET\n");
        r.headers_mut().insert(ALLOW, "GET, HEAD".parse().expect("a valid header value"));
        return Ok(r);
    }
    let (page_tx, page) = oneshot::channel();
    let page = match tx.send(page_tx).await {
        Ok(()) => page.await.unwrap_or_else(|_| Err("the agent is stopping".into())),
        Err(_) => Err("the agent is stopping".into()),
    };
    Ok(match page {
        Ok(text) => {
            let mut r = reply(StatusCode::OK, text);
            r.headers_mut().insert(CONTENT_TYPE, CONTENT.parse().expect("a valid header value"));
            r
        }
        Err(why) => reply(StatusCode::SERVICE_UNAVAILABLE, format!("no metrics: {why}\n")),
    })
}
