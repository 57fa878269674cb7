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
    if !report.nvml {
        println!("devices: NVML not available (device names and the driver's per-process usage not shown)");
    }
    for d in &report.devices {
        let h = |b: Option<u64>| b.map_or("?".to_string(), human);
        println!(
            "device {}: {} {} used {} of {}",
            d.index,
            d.name.as_deref().unwrap_or("?"),
            d.uuid.as_deref().unwrap_or("?"),
            h(d.used_bytes),
            h(d.total_bytes)
        );
        for p in &d.processes {
            let gpumem = report.processes.iter().find(|e| e.pid == Some(p.pid)).map(|e| e.bytes);
            println!("    pid {:>8}: driver {}  gpumem {}", p.pid, h(p.used_bytes), h(gpumem));
        }
    }
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
