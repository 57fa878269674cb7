//! Answering the control socket's requests (`control::protocol`).
use super::{held_now, Agent};
use crate::{
    control::{Request, Response},
    limits::{
        describe,
        policy::{spec::parse_target, Limit},
        table::LimitError,
    },
};

impl Agent {
    /// The answer to one request; a refused one says why.
    pub fn answer(&mut self, request: Request) -> Response {
        let result = match request {
            Request::Status => Ok(Response::Status(Box::new(self.status()))),
            Request::Top => Ok(Response::Top(Box::new(self.top()))),
            Request::LimitList => Ok(Response::Limits(self.limits.list())),
            Request::LimitSet { spec } => self.set_limit(&spec),
            Request::LimitClear { target } => self.clear_limit(&target),
        };
        result.unwrap_or_else(|e| Response::Error(crate::chain(&e)))
    }

    fn set_limit(&mut self, spec: &str) -> Result<Response, LimitError> {
        let limit = Limit::parse(spec.trim())?;
        let (kernel, ledger) = (&self.kernel, &self.ledger);
        let read = || held_now(kernel, ledger);
        let i = self.limits.set(&limit, &read)?;
        tracing::info!("{}", describe("limit set", &i));
        Ok(Response::LimitSet { target: i.limit.target.to_string(), action: i.action.to_string() })
    }

    fn clear_limit(&mut self, target: &str) -> Result<Response, LimitError> {
        let target = parse_target(target.trim())?;
        let i = self.limits.clear(&target)?;
        tracing::info!("limit cleared on {}", i.limit.target);
        Ok(Response::LimitCleared { target: i.limit.target.to_string() })
    }
}
