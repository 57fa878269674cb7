//! `gpumem status`: the running agent's usage table.
use comfy_table::{presets::NOTHING, Cell, CellAlignment, Table};

use crate::{
    cli::StatusArgs,
    control,
    output::{StatusEntry, StatusReport},
    sink::text::{human, known},
};

pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let report = control::status(&args.socket).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    match report.libcuda_attached {
        true => println!("libraries: {}", report.libraries.join(", ")),
        false => println!(
            "libraries: no libcuda.so* attached yet: the agent waits for the driver (nothing is traced until then){}",
            if report.libraries.is_empty() { String::new() } else { format!("; {}", report.libraries.join(", ")) }
        ),
    }
    println!(
        "records: {}   lost in kernel: {}   runs skipped: {}   returns without their entry: {}   unwritten: {}",
        report.records, report.dropped, report.skipped_runs, report.unmatched_returns, report.unwritten
    );
    print_devices(&report);
    println!();
    println!("{}", cgroup_table(&report.cgroups));
    println!();
    println!("{}", process_table(&report.processes));
    Ok(())
}

/// A table with gpumem's look: no borders, columns two spaces apart, the
/// columns from `right_from` on (numbers) right-aligned.
pub fn table(header: &[&str], right_from: usize) -> Table {
    let mut t = Table::new();
    t.load_style(NOTHING).set_header(header.iter().map(Cell::new));
    for (i, c) in t.column_iter_mut().enumerate() {
        c.set_padding((0, 2));
        if i >= right_from {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

fn print_devices(report: &StatusReport) {
    if !report.nvml {
        println!("devices: NVML not available (device names and the driver's per-process usage not shown)");
    }
    for d in &report.devices {
        let (name, uuid) = (d.name.as_deref().unwrap_or("?"), d.uuid.as_deref().unwrap_or("?"));
        println!(
            "device {}: {name} {uuid} used {} of {}",
            d.index,
            known(d.used_bytes),
            known(d.total_bytes)
        );
        for p in &d.processes {
            // What the driver holds beyond what gpumem saw allocated:
            // contexts, modules, the driver's own.
            let seen = report.resident(p.pid, d.index);
            let beyond = p.used_bytes.map(|u| u.saturating_sub(seen));
            println!(
                "    pid {:>8}: driver {}  gpumem {}  unaccounted {}",
                p.pid,
                known(p.used_bytes),
                human(seen),
                known(beyond)
            );
        }
    }
}

fn cgroup_table(cgroups: &[StatusEntry]) -> Table {
    let mut t = table(&["CGROUP", "POD/CONTAINER", "HELD", "KERNEL"], 2);
    for c in cgroups {
        t.add_row([
            c.cgroup.as_deref().unwrap_or("?").to_string(),
            pod_name(c),
            human(c.bytes),
            human(c.kernel_bytes),
        ]);
    }
    t
}

/// `namespace/pod/container` where the kubelet's directories name them
/// (`-` for a part they do not), empty outside pods.
pub fn pod_name(e: &StatusEntry) -> String {
    let Some(c) = e.container.as_ref().filter(|c| c.pod_uid.is_some()) else { return String::new() };
    let part = |p: &Option<String>| p.clone().unwrap_or_else(|| "-".into());
    format!("{}/{}/{}", part(&c.namespace), part(&c.pod), part(&c.name))
}

fn process_table(processes: &[StatusEntry]) -> Table {
    let mut t = table(&["PID", "COMM", "CGROUP", "HELD", "KERNEL"], 3);
    for p in processes {
        t.add_row([
            p.pid.unwrap_or(0).to_string(),
            p.comm.clone().unwrap_or_else(|| "?".into()),
            p.cgroup.clone().unwrap_or_else(|| "?".into()),
            human(p.bytes),
            human(p.kernel_bytes),
        ]);
    }
    t
}
