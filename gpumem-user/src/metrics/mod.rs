//! Prometheus metrics (`gpumem run --metrics ADDR:PORT`): what the agent
//! knows at the moment of a scrape, in Prometheus' text format.
//!
//! `counts` keeps the counters that no other stage keeps (limit decisions,
//! failed allocations), fed by the agent from each record; `scrape` is the
//! snapshot a scrape encodes (built by the agent, see `agent/scrape.rs`);
//! `encode` turns it into text (a fresh registry per scrape, so a process
//! that is gone is gone from the next scrape); `server` is the HTTP end,
//! which asks the event loop for each scrape.
pub mod counts;
pub mod encode;
pub mod scrape;
pub mod server;
