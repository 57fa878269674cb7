//! The agent's output schema, in one place: the record lines sinks write
//! (`lines`, with the `holders` of out-of-memory and limit records) and
//! what the control socket answers (`status`). The README's record table
//! documents these types.
pub mod holders;
pub mod lines;
pub mod status;

pub use holders::{Holder, Holders};
pub use lines::{
    monotonic_ns, Caller, DecisionEvent, DroppedEvent, DroppedLine, EventLine, Flag, LimitLine, Line,
    RecordEvent, Scope, UsageEvent, UsageLine,
};
pub use status::{DeviceInfo, DriverProcess, LimitStatus, SplitLine, StatusEntry, StatusReport};
