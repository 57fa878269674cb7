//! The agent's output schema, in one place: the record lines sinks write
//! (`lines`) and what the control socket answers (`status`). The README's
//! record table documents these types.
pub mod lines;
pub mod status;

pub use lines::{
    monotonic_ns, Caller, DecisionEvent, DroppedEvent, DroppedLine, EventLine, Flag, LimitLine, Line,
    RecordEvent, Scope, UsageEvent, UsageLine,
};
pub use status::{DeviceInfo, DriverProcess, LimitStatus, SplitLine, StatusEntry, StatusReport};
