//! gpumem's agent as a library: the binary (`main.rs`) is a thin CLI over
//! these modules, and the integration tests read its output types and use
//! its control client.
//!
//! Data flows one way: `bpf` loads and attaches the kernel side and reads
//! its maps; each ring-buffer record goes through the `agent`'s pipeline:
//! `decode` -> `ledger` -> `limits` (bases follow carried memory) ->
//! `enrich` -> `output` -> `sink`. `health` counts what was lost and
//! recovers missed exits; `control` carries `gpumem status` and `gpumem
//! limit` requests to the event loop (`cmd::run`), the only place that
//! drives the agent; `metrics` serves scrapes the same way (the page is
//! built by the loop from the agent's state).
pub mod agent;
pub mod bpf;
pub mod cli;
pub mod cmd;
pub mod control;
pub mod decode;
pub mod enrich;
pub mod fast_hash;
pub mod flock;
pub mod health;
pub mod holders;
pub mod ledger;
pub mod limits;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod output;
pub mod privileges;
pub mod sink;
pub mod start_phases;
pub mod stop_at;

/// An error with its causes, `outer: inner: innermost`, for a log line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
