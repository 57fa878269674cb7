//! The control protocol: one JSON object per line each way. A client
//! writes a [`Request`]; the agent answers with one [`Response`] line.
use serde::{Deserialize, Serialize};

use crate::output::{LimitStatus, StatusReport};

/// What a client asks the agent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// The usage table (`gpumem status`).
    Status,
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
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn requests_read_back_as_written() {
        let all = [
            Request::Status,
            Request::LimitList,
            Request::LimitSet { spec: "pid:1=1GiB".into() },
            Request::LimitClear { target: "pid:1".into() },
        ];
        for r in all {
            let line = serde_json::to_string(&r).unwrap();
            assert!(!line.contains('\n'));
            assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), r);
        }
        assert_eq!(serde_json::to_string(&Request::Status).unwrap(), r#"{"request":"status"}"#);
    }

    proptest! {
        /// Whatever a client sends, reading it is a request or an error,
        /// never a panic.
        #[test]
        fn any_line_is_a_request_or_an_error(line in ".{0,64}") {
            let _ = serde_json::from_str::<Request>(&line);
        }
    }
}
