//! The agent's output schema, in one place: the record lines sinks write
//! (`lines`, with the `holders` of out-of-memory and limit records) and
//! what the control socket answers (`status`). docs/records.md
//! documents these types. `top` is what `gpumem top` asks for.
pub mod caller;
pub mod declared;
pub mod held;
pub mod holders;
pub mod lines;
pub mod status;
pub mod top;

pub use holders::{Holder, Holders};
pub use lines::{
    monotonic_ns, Caller, DecisionEvent, DroppedEvent, DroppedLine, EventLine, Flag, LimitLine, Line,
    RecordEvent, Scope, UsageEvent, UsageLine,
};
pub use status::{DeviceInfo, DriverProcess, LimitStatus, SplitLine, StatusEntry, StatusReport};
pub use top::{Allocation, ProcessAllocations, RecentEvent, RecentKind, TopReport};
