//! `gpumem status`: the running agent's usage table.
use crate::{cli::StatusArgs, control, sink::text::human};

pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let report = control::status(&args.socket).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("libcuda: {}", report.libraries.join(", "));
    println!("records: {}   lost in kernel: {}", report.records, report.dropped);
    println!();
    println!("{:<36} {:>14} {:>14}", "CGROUP", "HELD", "KERNEL");
    for c in &report.cgroups {
        println!(
            "{:<36} {:>14} {:>14}",
            c.cgroup.as_deref().unwrap_or("?"),
            human(c.bytes),
            human(c.kernel_bytes)
        );
    }
    println!();
    println!("{:>8} {:<16} {:<28} {:>14} {:>14}", "PID", "COMM", "CGROUP", "HELD", "KERNEL");
    for p in &report.processes {
        println!(
            "{:>8} {:<16} {:<28} {:>14} {:>14}",
            p.pid.unwrap_or(0),
            p.comm.as_deref().unwrap_or("?"),
            p.cgroup.as_deref().unwrap_or("?"),
            human(p.bytes),
            human(p.kernel_bytes)
        );
    }
    Ok(())
}
