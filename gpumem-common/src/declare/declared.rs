//! What the kernel keeps for a process whose environment declares limits
//! (`DECLARED`, by tgid), made from the environment's `Declaration`.
use super::{chars::bounded, declaration::Declaration, names::DEVICES};
use crate::maps::{LimitRule, LimitState};

/// What the kernel keeps for a process that declared limits (`DECLARED`,
/// by tgid): its limits and what each counts. Removed at its exit and
/// exec; copied, its counts at zero, to a child it forks.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declared {
    pub total: LimitRule,
    pub total_state: LimitState,
    pub each: [u64; DEVICES],
    pub each_state: [LimitState; DEVICES],
    /// Bits of the devices whose limit is in force.
    pub each_set: u32,
    pub each_action: u32,
    pub each_signal: u32,
    pub each_view: u32,
    /// The exec it was read at (the new image's first stack pointer): a
    /// second build's exec program, during a takeover, finds it done.
    pub exec_sp: u64,
}

impl Declared {
    /// The limits in force of `d`, counting nothing yet.
    pub fn new(d: &Declaration, exec_sp: u64) -> Self {
        let mut kept = Self {
            total: LimitRule::default(),
            total_state: LimitState::default(),
            each: [0; DEVICES],
            each_state: [LimitState::default(); DEVICES],
            each_set: 0,
            each_action: 0,
            each_signal: 0,
            each_view: 0,
            exec_sp: 0,
        };
        kept.fill(d, exec_sp);
        kept
    }

    /// [`Self::new`] in place (the kernel's stack has no room for one).
    #[inline(always)]
    pub fn fill(&mut self, d: &Declaration, exec_sp: u64) {
        self.total = d.total;
        self.each = d.each;
        self.each_set = if d.each_error == 0 { d.each_set } else { 0 };
        (self.each_action, self.each_signal, self.each_view) = (d.each_action, d.each_signal, d.each_view);
        self.exec_sp = exec_sp;
        self.zero_counts();
    }

    /// Counting nothing (a forked child's copy).
    #[inline(always)]
    pub fn zero_counts(&mut self) {
        self.total_state = LimitState::default();
        let mut i = 0;
        while i < DEVICES {
            self.each_state[i] = LimitState::default();
            i += 1;
        }
    }

    /// Device `device`'s own limit as a rule, where one is in force.
    #[inline(always)]
    pub fn device_rule(&self, device: u32) -> Option<LimitRule> {
        let i = device as usize;
        (i < DEVICES && self.each_set & (1 << i) != 0).then(|| LimitRule {
            hard: self.each[bounded(i, DEVICES)],
            soft: 0,
            action: self.each_action,
            signal: self.each_signal,
            device,
            active: 1,
            view: self.each_view,
            span: 0,
        })
    }
}

const _: () = assert!(core::mem::size_of::<Declared>() == 464);

#[cfg(feature = "user")]
// SAFETY: repr(C), integers only, no padding (size asserted above).
unsafe impl aya::Pod for Declared {}
