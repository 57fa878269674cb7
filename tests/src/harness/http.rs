//! A minimal HTTP/1.0 GET, for asking the agent's metrics endpoint and
//! Prometheus' query API (HTTP/1.0: the answer is the bytes up to the
//! close, never chunked).
use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

/// An answer: status code, header lines and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<String>,
    pub body: String,
}

impl Answer {
    /// The value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find_map(|h| {
            let (k, v) = h.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// `METHOD path` against `addr`; Err with what failed (connection refused
/// while a server starts, say).
pub fn request(addr: SocketAddr, method: &str, path: &str) -> Result<Answer, String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| format!("{addr}: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("{addr}: reading the answer: {e}"))?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) =
        text.split_once("\r\n\r\n").ok_or_else(|| format!("{addr}: no header end in {text:?}"))?;
    let mut lines = head.lines();
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("{addr}: no status in {status_line:?}"))?;
    Ok(Answer { status, headers: lines.map(String::from).collect(), body: body.to_string() })
}

pub fn get(addr: SocketAddr, path: &str) -> Result<Answer, String> {
    request(addr, "GET", path)
}

/// `s` as a URL query value.
pub fn query_value(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
