//! The drain timer, and the agent's idle: stopping that timer when nothing
//! comes.
//!
//! Records are submitted without waking the agent (a wake-up costs the
//! calling thread more than its record), so the agent drains the ring on
//! a timer, `DRAIN_EVERY`. Each tick wakes it, records or not: ten a
//! second, most of what an idle agent costs. After `IDLE_AFTER` ticks that
//! read nothing, the agent marks every CPU idle (`bpf/wake.rs`) and stops
//! the timer: the first record after the mark, on any CPU, wakes it at
//! once; it clears the marks and ticks again. The health step drains the
//! ring too while the timer is stopped, so a record that raced the
//! marking (it looked at the backlog before the mark, and was committed
//! after the drain that followed it) waits at most a second.
use std::time::Duration;

use tokio::time::Interval;

use crate::{agent::Agent, bpf::wake::WakeMarks};

/// How often the agent drains records the kernel submitted quietly: how
/// late a record may reach the output (requests, scrapes, SIGHUP and
/// usage records drain first; a backlog of `WAKEUP_BACKLOG` wakes the
/// agent at once, and so does a record after a second without any). Each
/// wake-up costs the agent about as much as 50 records: at 20 ms an idle
/// agent took 0.5% of a core for these ticks, at 100 ms 0.16%.
pub const DRAIN_EVERY: Duration = Duration::from_millis(100);
/// Ticks that read nothing before the agent goes idle: a second.
const IDLE_AFTER: u32 = 10;

/// The drain timer, stopped while the agent is idle.
pub struct DrainTimer {
    tick: Interval,
    /// None where idle is off (`--bpf-log`, whose ring has no marks, or
    /// marks that could not be written).
    marks: Option<WakeMarks>,
    /// Ticks in a row that read nothing.
    quiet: u32,
    idle: bool,
}

impl DrainTimer {
    pub fn new(marks: Option<WakeMarks>) -> Self {
        Self { tick: tokio::time::interval(DRAIN_EVERY), marks, quiet: 0, idle: false }
    }

    /// The next tick; never while idle.
    pub async fn tick(&mut self) {
        match self.idle {
            true => std::future::pending().await,
            false => drop(self.tick.tick().await),
        }
    }

    /// The next tick at once: a drain stopped at a bound, more is waiting.
    pub fn reset_immediately(&mut self) {
        self.tick.reset_immediately();
    }

    pub fn idle(&self) -> bool {
        self.idle
    }

    /// After a drain that read `records` records; `woken`: the ring's
    /// wake-up asked for it. A record read while idle ends it, and so does
    /// a wake-up that read nothing (the record that woke the agent waits
    /// behind one another CPU has not committed yet, and its CPU's mark is
    /// spent): a wake-up counted, and the timer ticks again one period on.
    pub fn read(&mut self, records: u64, woken: bool, agent: &mut Agent) {
        if records == 0 && !(woken && self.idle) {
            return;
        }
        self.quiet = 0;
        if !self.idle {
            return;
        }
        self.idle = false;
        self.clear();
        self.tick.reset();
        agent.set_idle(false, woken);
    }

    /// The agent stops: a mark left in a map kept for the next agent
    /// (`--persist`) would only wake it once a CPU; cleared all the same.
    pub fn stop(&mut self) {
        if std::mem::take(&mut self.idle) {
            self.clear();
        }
    }

    fn clear(&mut self) {
        if let Some(marks) = self.marks.as_mut() {
            if let Err(e) = marks.clear() {
                // Left, each CPU's next look wakes the agent once more.
                tracing::warn!("clearing the idle marks: {e}");
            }
        }
    }

    /// After a tick that read nothing: whether the agent should go idle
    /// now (see [`Self::mark`]).
    pub fn quiet_tick(&mut self) -> bool {
        self.quiet += 1;
        self.marks.is_some() && self.quiet >= IDLE_AFTER
    }

    /// Marks every CPU idle; false (nothing marked) where the marks cannot
    /// be written, said once, and idle is off from then on. The caller
    /// drains again and calls [`Self::settle`].
    pub fn mark(&mut self) -> bool {
        self.quiet = 0;
        let Some(marks) = self.marks.as_mut() else { return false };
        match marks.mark() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(
                    "the agent keeps its drain timer running when idle: marking the CPUs failed: {e}"
                );
                self.marks = None;
                false
            }
        }
    }

    /// Goes idle once the CPUs are marked, unless the drain after the
    /// marking read `records`, or a CPU looked at the backlog meanwhile (its
    /// record may have looked before its mark and not woken the agent):
    /// then the marks are cleared and the timer runs on.
    pub fn settle(&mut self, records: u64, agent: &mut Agent) {
        let Some(marks) = self.marks.as_mut() else { return };
        match marks.intact() {
            Ok(true) if records == 0 => {
                self.idle = true;
                agent.set_idle(true, false);
                return;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(
                    "the agent keeps its drain timer running when idle: reading the CPUs' marks failed: {e}"
                );
                self.clear();
                self.marks = None;
                return;
            }
        }
        self.clear();
    }
}
