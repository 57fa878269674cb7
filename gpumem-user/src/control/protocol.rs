//! The control protocol: one JSON object per line each way. A client
//! writes a [`Request`]; the agent answers with one [`Response`] line.
use serde::{Deserialize, Serialize};

use crate::output::{LimitStatus, StatusReport, TopReport};

/// What a client asks the agent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// The usage table (`gpumem status`).
    Status,
    /// The usage table, the limits, the latest decisions and failures and
    /// each process's oldest live allocations (`gpumem top`).
    Top,
    /// The limits in force (`gpumem limit list`).
    LimitList,
    /// Set a limit, in `--limit`'s syntax (`gpumem limit set`).
    LimitSet { spec: String },
    /// Take a target's limit out of force (`gpumem limit clear`).
    LimitClear { target: String },
}

/// The agent's answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    Status(Box<StatusReport>),
    Top(Box<TopReport>),
    Limits(Vec<LimitStatus>),
    /// A limit was set: its target and the action the kernel will take.
    LimitSet {
        target: String,
        action: String,
    },
    /// A limit was cleared.
    LimitCleared {
        target: String,
    },
    /// The request was refused, and why.
    Error(String),
}

#[cfg(test)]
mod tests;
