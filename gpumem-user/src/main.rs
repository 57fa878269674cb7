//! `gpumem`: a thin command line over the library (`lib.rs`).
// The binary links the library's dependencies without naming them.
#![allow(unused_crate_dependencies)]
use clap::Parser;
use gpumem::{
    cli::{Cli, Command},
    cmd,
};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    gpumem::logging::init();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Run(args) => cmd::run::run(*args).await,
            Command::Status(args) => cmd::status::status(args).await,
            Command::Top(args) => cmd::top::top(args).await,
            Command::Limit(args) => cmd::limit::limit(args).await,
            Command::Probe(args) => cmd::probe::probe(args),
            Command::Detach(args) => cmd::detach::detach(args),
            Command::Floor(args) => cmd::floor::floor(args).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
