//! A real Prometheus server (Debian's, which `cargo xtask test` fetches and
//! names in `GPUMEM_PROMETHEUS`) scraping the agent every 250 ms from a
//! loopback port, with its data in the test's scratch directory; stopped
//! when dropped. Queries go through its HTTP API, as Grafana's would.
use std::{
    net::{SocketAddr, TcpListener},
    path::PathBuf,
    process::{Child, Command, Stdio},
};

use serde_json::Value;

use super::{
    env::{provided, scratch},
    http::{get, query_value},
    poll::poll,
};

pub struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// A loopback port free now (Prometheus cannot say which port it bound
/// when given 0).
fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
    l.local_addr().expect("the port bound")
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (`/metrics`), once it answers
    /// queries; None (the test says why it is skipped) without
    /// `GPUMEM_PROMETHEUS`.
    pub fn scraping(target: SocketAddr) -> Option<Self> {
        let bin = provided("GPUMEM_PROMETHEUS", "fetches Debian's prometheus and sets it")?;
        let dir = scratch();
        let config = dir.path().join("prometheus.yml");
        let text = format!(
            "global:\n  scrape_interval: 250ms\n  scrape_timeout: 250ms\nscrape_configs:\n  - job_name: gpumem\n    static_configs:\n      - targets: ['{target}']\n"
        );
        std::fs::write(&config, text).expect("writing prometheus.yml");
        let log = dir.path().join("prometheus.log");
        let addr = free_port();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("creating prometheus.log"))
            .spawn()
            .expect("starting prometheus");
        let p = Self { child, addr, log, _dir: dir };
        let _ready = poll(
            "Prometheus to be ready",
            || get(p.addr, "/-/ready").map(|a| a.status),
            |s| *s == Ok(200),
            || p.log(),
        );
        Some(p)
    }

    /// Its log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An instant query's result vector: each series' labels and value.
    pub fn query(&self, promql: &str) -> Result<Vec<(Value, f64)>, String> {
        let a = get(self.addr, &format!("/api/v1/query?query={}", query_value(promql)))?;
        let v: Value = serde_json::from_str(&a.body).map_err(|e| format!("{e}: {}", a.body))?;
        if v["status"] != "success" {
            return Err(format!("query {promql} failed: {}", a.body));
        }
        let result = v["data"]["result"].as_array().ok_or_else(|| format!("no result vector: {}", a.body))?;
        result
            .iter()
            .map(|s| {
                let value = s["value"][1].as_str().and_then(|v| v.parse().ok());
                value.map(|v| (s["metric"].clone(), v)).ok_or_else(|| format!("no value in {s}"))
            })
            .collect()
    }

    /// Waits until `promql`'s result satisfies `cond`, and returns it.
    pub fn wait_for(&self, promql: &str, cond: impl Fn(&[(Value, f64)]) -> bool) -> Vec<(Value, f64)> {
        let what = format!("Prometheus to answer `{promql}` as expected");
        let got = poll(&what, || self.query(promql), |r| r.as_ref().is_ok_and(|r| cond(r)), || self.log());
        got.expect("an answer")
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
