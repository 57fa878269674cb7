//! Where a traced pair's time goes: the kernel's own run-time statistics
//! (`BPF_ENABLE_STATS`: run count and nanoseconds per program) for the
//! programs a tracer holds, over one extra alloc+free loop. The statistics
//! cost two clock reads per program run, so they are on for that loop
//! only, never while the ratios are measured. What a pair costs beyond its
//! programs' time is the trap itself, the same under every tracer.
use std::collections::BTreeMap;

use anyhow::Context;

/// Runs and nanoseconds spent in one program (summed over the programs of
/// that name, as one name may be loaded once per probe site).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProgramTime {
    pub runs: u64,
    pub ns: u64,
}

impl ProgramTime {
    pub fn ns_per_run(&self) -> Option<f64> {
        (self.runs > 0).then(|| self.ns as f64 / self.runs as f64)
    }
}

/// Time per program name.
pub type Runtime = BTreeMap<String, ProgramTime>;

/// Run counts and times so far of the programs process `pid` holds, by id.
fn snapshot(pid: u32) -> anyhow::Result<BTreeMap<u32, (String, ProgramTime)>> {
    Ok(super::verifier::programs_held(pid)?
        .iter()
        .map(|info| {
            let t = ProgramTime { runs: info.run_count(), ns: info.run_time().as_nanos() as u64 };
            (info.id(), (super::verifier::name(info), t))
        })
        .collect())
}

/// What the programs of process `pid` ran while `work` ran, with the
/// kernel's statistics on for that time only. Programs that did not run
/// are left out.
pub fn measure(pid: u32, work: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<Runtime> {
    let [r] = measure_each([pid], work)?;
    Ok(r)
}

/// [`measure`] for each of `pids` (tracers attached side by side, whose
/// programs run at the same hits) over the same `work`.
pub fn measure_each<const N: usize>(
    pids: [u32; N],
    work: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<[Runtime; N]> {
    let before = pids.iter().map(|&p| snapshot(p)).collect::<anyhow::Result<Vec<_>>>()?;
    let stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).context(
        "turning on the kernel's eBPF run-time statistics (BPF_ENABLE_STATS, kernel 5.8 and later)",
    )?;
    let worked = work();
    drop(stats);
    worked?;
    let mut out = [(); N].map(|()| Runtime::new());
    for ((slot, pid), was) in out.iter_mut().zip(pids).zip(&before) {
        *slot = between(was, &snapshot(pid)?);
    }
    Ok(out)
}

/// Per-name differences between two snapshots; programs that did not run
/// are left out.
fn between(
    before: &BTreeMap<u32, (String, ProgramTime)>,
    after: &BTreeMap<u32, (String, ProgramTime)>,
) -> Runtime {
    let mut out = Runtime::new();
    for (id, (name, t)) in after {
        let was = before.get(id).map(|b| b.1).unwrap_or_default();
        let runs = t.runs.saturating_sub(was.runs);
        if runs == 0 {
            continue;
        }
        let sum = out.entry(name.clone()).or_default();
        sum.runs += runs;
        sum.ns += t.ns.saturating_sub(was.ns);
    }
    out
}

/// Nanoseconds inside the programs per alloc+free pair, over `pairs`.
pub fn per_pair(r: &Runtime, pairs: usize) -> f64 {
    r.values().map(|t| t.ns).sum::<u64>() as f64 / pairs.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(runs: u64, ns: u64) -> ProgramTime {
        ProgramTime { runs, ns }
    }

    #[test]
    fn differences_are_summed_per_name_and_idle_programs_left_out() {
        let before = BTreeMap::from([
            (1, ("floor_entry".to_string(), t(10, 1_000))),
            (2, ("floor_entry".to_string(), t(0, 0))),
            (3, ("idle".to_string(), t(5, 500))),
        ]);
        let after = BTreeMap::from([
            (1, ("floor_entry".to_string(), t(110, 3_000))),
            (2, ("floor_entry".to_string(), t(100, 2_500))),
            (3, ("idle".to_string(), t(5, 500))),
            (4, ("new_return".to_string(), t(7, 70))),
        ]);
        let r = between(&before, &after);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(r["floor_entry"], t(200, 4_500));
        assert_eq!(r["new_return"], t(7, 70));
        assert_eq!(r["floor_entry"].ns_per_run(), Some(22.5));
        assert_eq!(per_pair(&r, 100), 45.7);
        assert_eq!(t(0, 0).ns_per_run(), None);
    }
}
