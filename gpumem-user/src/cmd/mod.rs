//! One module per subcommand.
pub mod detach;
pub mod floor;
pub mod limit;
pub mod probe;
pub mod run;
pub mod status;
pub mod top;
