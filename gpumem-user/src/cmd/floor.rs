//! `gpumem floor` (hidden; for `cargo xtask bench`): attach empty programs
//! at every probe site of the given libraries and wait for SIGINT, so the
//! bench can measure the kernel's own uprobe cost.
use tokio::signal::unix::{signal, SignalKind};

use crate::{
    bpf::{discover, probes::FLOOR, Tracer},
    cli::FloorArgs,
    privileges,
};

pub async fn floor(args: FloorArgs) -> anyhow::Result<()> {
    privileges::check()?;
    let mut libs = discover::LibrarySet::default();
    discover::explicit(&mut libs, &args.libcuda, gpumem_common::api::Library::Cuda)?;
    let mut tracer = Tracer::load()?;
    for lib in &libs.libs {
        let r = tracer.attach_programs(lib, Some(FLOOR))?;
        tracing::info!("floor attached at {} sites in {}", r.attached.len(), lib.path.display());
    }
    tracing::info!("ready");
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
    tracer.detach_all();
    Ok(())
}
