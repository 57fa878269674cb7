//! `gpumem detach`: removes what `gpumem run --persist` left in the kernel.
use anyhow::bail;

use crate::{bpf::persist, cli::DetachArgs, privileges};

pub fn detach(args: DetachArgs) -> anyhow::Result<()> {
    privileges::check()?;
    if std::os::unix::net::UnixStream::connect(&args.socket).is_ok() {
        bail!(
            "an agent answers on {}: stop it first (SIGTERM; with --persist its probes stay pinned), then run \
             `gpumem detach` again",
            args.socket.display()
        );
    }
    // Not while an agent is starting or taking over (before it answers).
    let _root = args.pin_dir.exists().then(|| persist::lock::take(&args.pin_dir)).transpose()?;
    let started = std::time::Instant::now();
    let removed = persist::remove(&args.pin_dir)?;
    if removed == persist::Removed::default() {
        println!("nothing of gpumem is pinned at {}", args.pin_dir.display());
    } else {
        println!(
            "detached {} probe link(s) and removed {} map(s) pinned at {} in {} ms",
            removed.links,
            removed.maps,
            args.pin_dir.display(),
            started.elapsed().as_millis()
        );
    }
    Ok(())
}
