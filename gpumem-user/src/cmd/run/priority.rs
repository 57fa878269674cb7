//! The agent's scheduling priority (`--priority-boost`). Records wait in
//! the ring only as long as it holds them; on a host whose cores the
//! traced processes keep busy, the agent at the same priority gets less
//! than its share (measured on a 2-core host with two unpaced loops: the
//! agent runnable but waiting 175 to 224 ms of each half second, records
//! lost in 7 runs of 9; at nice -4, 39 to 73 ms and none in 6). auditd raises its
//! priority for the same reason (`priority_boost`, 4 by default). The
//! agent takes only the time its records need, so a boost cannot take
//! more from the workloads than that.
use nix::errno::Errno;

/// The nice value to set for a boost of `boost` from `current`: -`boost`,
/// unless the agent was started at that or lower already (an operator's
/// own choice is kept), or no boost was asked for.
pub fn target(current: i32, boost: u8) -> Option<i32> {
    let want = -i32::from(boost);
    (boost > 0 && current > want).then_some(want)
}

/// Lowers the agent's nice value to -`boost` (see [`target`]): on the
/// calling thread, which runs the agent's loop, and so on every thread it
/// starts later. Refused (no CAP_SYS_NICE), the agent runs on as it was,
/// and says what that risks.
pub fn boost(boost: u8) {
    Errno::clear();
    // SAFETY: plain syscalls about the calling thread.
    let current = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    if current == -1 && Errno::last_raw() != 0 {
        let err = Errno::last();
        tracing::warn!("cannot read the agent's scheduling priority: {err}");
        return;
    }
    let Some(want) = target(current, boost) else { return };
    // SAFETY: as above.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, want) } != 0 {
        // Read before anything else runs that may set errno.
        let err = Errno::last();
        tracing::warn!(
            "cannot raise the agent's scheduling priority to nice {want} (--priority-boost {boost}): {}; on a \
             host whose cores the traced processes keep busy records may then be lost (`dropped` records say \
             so): give the agent CAP_SYS_NICE, or --priority-boost 0 to run at nice {current} without this \
             warning",
            err
        );
        return;
    }
    tracing::debug!("scheduling priority raised: nice {current} -> {want}");
}

#[cfg(test)]
mod tests {
    use super::target;

    #[test]
    fn a_boost_lowers_nice_but_never_raises_it() {
        assert_eq!(target(0, 4), Some(-4));
        assert_eq!(target(5, 4), Some(-4));
        assert_eq!(target(-4, 4), None, "already there");
        assert_eq!(target(-10, 4), None, "the operator's own, higher priority kept");
        assert_eq!(target(0, 0), None, "no boost asked for");
        assert_eq!(target(3, 0), None, "nor one undone");
        assert_eq!(target(19, 20), Some(-20));
    }
}
