//! One module per subcommand.
pub mod run;
pub mod status;
