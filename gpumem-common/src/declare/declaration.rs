//! What one environment declares, gathered variable by variable (the
//! kernel at exec, the agent for a process already running), and the
//! limits the kernel keeps for the process from it.
//!
//! - `GPUMEM_LIMIT` is a rule as `--limit` writes it, over all devices
//!   or the one its `device=` names;
//! - HAMi's, NVIDIA's and KAI's variables limit each device on its own,
//!   as their own readers do: `CUDA_DEVICE_MEMORY_LIMIT_<i>` where it
//!   reads above 0, else `CUDA_DEVICE_MEMORY_LIMIT`; where several
//!   declare a device, the smallest holds;
//! - the operator's cap (`--env-limits-max`) clamps what is above it;
//! - the action of a variable that names none is the agent's default,
//!   and the view the card a limit shows: as for `--limit`.
use super::{
    chars::bounded,
    mib::MibError,
    names::{source, DEVICES},
    rule::{error, view, RuleError, RuleText},
};
use crate::maps::{limit_action, limit_view, LimitRule};

/// How a declaration becomes limits: the agent's defaults and cap
/// (`EnvConfig`) and whether this kernel can deny.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Defaults {
    pub action: u32,
    pub signal: u32,
    pub can_deny: bool,
    pub view_ok: bool,
    /// 0: no cap.
    pub cap: u64,
}

/// The agent's word on declarations, for the kernel (`ENV_CONFIG[0]`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnvConfig {
    /// The variables honoured (`names::honour` bits); 0: none.
    pub honour: u32,
    /// The action of a declaration that names none, and its signal.
    pub default_action: u32,
    pub default_signal: u32,
    /// 1 where a limit can tell its processes its view (`view=limit`).
    pub view_ok: u32,
    /// The most a declaration may set, in bytes (0: no cap).
    pub cap: u64,
    /// `task_struct.tgid`'s offset, to follow forks (0: not followed).
    pub tgid_offset: u32,
    pub _pad: u32,
}

impl EnvConfig {
    pub const fn defaults(&self, can_deny: bool) -> Defaults {
        Defaults {
            action: self.default_action,
            signal: self.default_signal,
            can_deny,
            view_ok: self.view_ok != 0,
            cap: self.cap,
        }
    }
}

/// The rule a text says, as the kernel applies it: the default action
/// where it names none; deny's fallback where this kernel cannot deny
/// (refused without one); `view=limit` refused where limits cannot show
/// their view. Errors are `rule::error` codes, as the agent's `--limit`.
#[inline(always)]
pub fn resolve(t: &RuleText, d: &Defaults) -> Result<LimitRule, u32> {
    let (mut action, mut signal) = if t.action != 0 { (t.action, t.signal) } else { (d.action, d.signal) };
    if action == limit_action::DENY && !d.can_deny {
        if t.fallback == 0 {
            return Err(error::DENY_UNSUPPORTED);
        }
        (action, signal) = (t.fallback, t.fallback_signal);
    }
    let view = match t.view {
        view::LIMIT if !d.view_ok => return Err(error::VIEW_UNSUPPORTED),
        view::LIMIT => limit_view::LIMIT,
        view::DRIVER => limit_view::DRIVER,
        _ if d.view_ok => limit_view::LIMIT,
        _ => limit_view::DRIVER,
    };
    Ok(LimitRule { hard: t.hard, soft: t.soft, action, signal, device: t.device(), active: 1, view, span: 0 })
}

/// `Declaration::flags`.
pub mod flag {
    /// The soft limit was not below the clamped hard one: dropped.
    pub const SOFT_DROPPED: u32 = 1;
    /// The environment had more strings than the kernel reads: a variable
    /// past them was not seen at exec (the agent reads the rest).
    pub const INCOMPLETE: u32 = 2;
}

/// The GPUMEM_LIMIT text a record carries (its first bytes).
pub const TEXT_BYTES: usize = 128;

/// One environment's declarations: what the kernel gathers at exec and
/// sends the agent (a `declared` record), and what the agent gathers
/// itself for a process already running. Bits of `found`, `failed` and
/// `clamped` are `source::bit`s.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct Declaration {
    /// `GPUMEM_LIMIT`'s rule (`active` 1 where it is in force).
    pub total: LimitRule,
    /// Each device's limit (where `each_set` has its bit).
    pub each: [u64; DEVICES],
    /// HAMi's values as read (0: none, as HAMi-core takes it).
    pub hami: [u64; DEVICES],
    pub hami_all: u64,
    /// NVIDIA's and KAI's, in bytes (where found and not failed).
    pub nvidia: u64,
    pub kai: u64,
    /// The operator's cap at the time (0: none).
    pub cap: u64,
    pub found: u32,
    pub failed: u32,
    pub clamped: u32,
    pub each_set: u32,
    /// The action, signal and view of each device's limit.
    pub each_action: u32,
    pub each_signal: u32,
    pub each_view: u32,
    /// Why no device's limit is in force though some were declared (a
    /// `rule::error` code; 0: none).
    pub each_error: u32,
    /// `mib` errors of NVIDIA's and KAI's (1 not a number, 2 too large).
    pub nvidia_error: u32,
    pub kai_error: u32,
    /// [`flag`] bits.
    pub flags: u32,
    pub text_len: u32,
    /// Why `GPUMEM_LIMIT` was refused.
    pub error: RuleError,
    /// `GPUMEM_LIMIT`'s value as read (`text_len` bytes of it).
    pub text: [u8; TEXT_BYTES],
}

impl Default for Declaration {
    fn default() -> Self {
        Self {
            total: LimitRule::default(),
            each: [0; DEVICES],
            hami: [0; DEVICES],
            hami_all: 0,
            nvidia: 0,
            kai: 0,
            cap: 0,
            found: 0,
            failed: 0,
            clamped: 0,
            each_set: 0,
            each_action: 0,
            each_signal: 0,
            each_view: 0,
            each_error: 0,
            nvidia_error: 0,
            kai_error: 0,
            flags: 0,
            text_len: 0,
            error: RuleError::default(),
            text: [0; TEXT_BYTES],
        }
    }
}

impl Declaration {
    /// `GPUMEM_LIMIT`, read.
    #[inline(always)]
    pub fn add_rule(&mut self, read: Result<RuleText, RuleError>, d: &Defaults) {
        self.found |= source::bit(source::GPUMEM);
        let resolved = match read {
            Ok(t) => resolve(&t, d).map_err(|code| RuleError { code, ..RuleError::default() }),
            Err(e) => Err(e),
        };
        match resolved {
            Ok(mut rule) => {
                if d.cap != 0 && rule.hard > d.cap {
                    rule.hard = d.cap;
                    self.clamped |= source::bit(source::GPUMEM);
                    if rule.soft >= rule.hard {
                        rule.soft = 0;
                        self.flags |= flag::SOFT_DROPPED;
                    }
                }
                self.total = rule;
            }
            Err(e) => {
                self.failed |= source::bit(source::GPUMEM);
                self.error = e;
                self.total = LimitRule::default();
            }
        }
    }

    /// HAMi's `CUDA_DEVICE_MEMORY_LIMIT` (`device` None) or `_<device>`,
    /// read as HAMi-core reads it.
    #[inline(always)]
    pub fn add_hami(&mut self, device: Option<u32>, bytes: u64) {
        match device {
            Some(i) => {
                self.found |= source::bit(source::HAMI_DEVICE);
                self.hami[bounded(i as usize, DEVICES)] = bytes;
            }
            None => {
                self.found |= source::bit(source::HAMI);
                self.hami_all = bytes;
            }
        }
    }

    /// NVIDIA's or KAI's variable (`source`), read.
    #[inline(always)]
    pub fn add_mib(&mut self, src: u32, read: Result<u64, MibError>) {
        self.found |= source::bit(src);
        let (value, code) = match read {
            Ok(bytes) => (bytes, 0),
            Err(MibError::NotANumber) => (0, 1),
            Err(MibError::TooLarge) => (0, 2),
        };
        if code != 0 {
            self.failed |= source::bit(src);
        }
        if src == source::NVIDIA {
            (self.nvidia, self.nvidia_error) = (value, code);
        } else {
            (self.kai, self.kai_error) = (value, code);
        }
    }

    /// Every variable read: each device's limit, clamped, with its action.
    pub fn finish(&mut self, d: &Defaults) {
        for i in 0..DEVICES {
            self.finish_device(i, d);
        }
        self.finish_rest(d);
    }

    /// [`Self::finish`] for device `i` (the kernel calls it from a
    /// `bpf_loop`, which the verifier walks once, not sixteen times).
    #[inline(always)]
    pub fn finish_device(&mut self, i: usize, d: &Defaults) {
        let i = bounded(i, DEVICES);
        let hami = if self.hami[i] > 0 { self.hami[i] } else { self.hami_all };
        let usable = self.found & !self.failed;
        let mut least = u64::MAX;
        let mut set = false;
        for (on, value, src) in [
            (hami > 0, hami, source::HAMI),
            (usable & source::bit(source::NVIDIA) != 0, self.nvidia, source::NVIDIA),
            (usable & source::bit(source::KAI) != 0, self.kai, source::KAI),
        ] {
            if on {
                set = true;
                least = least.min(value);
                if d.cap != 0 && value > d.cap {
                    self.clamped |= source::bit(src);
                }
            }
        }
        if set {
            self.each[i] = if d.cap != 0 { least.min(d.cap) } else { least };
            self.each_set |= 1 << i;
        }
    }

    /// [`Self::finish`] once every device's is done.
    #[inline(always)]
    pub fn finish_rest(&mut self, d: &Defaults) {
        self.cap = d.cap;
        self.each_view = if d.view_ok { limit_view::LIMIT } else { limit_view::DRIVER };
        (self.each_action, self.each_signal) = (d.action, d.signal);
        if self.each_set != 0 && d.action == limit_action::DENY && !d.can_deny {
            self.each_error = error::DENY_UNSUPPORTED;
        }
    }

    /// The variable whose value limits device `i` (the smallest declared,
    /// the first of HAMi's, NVIDIA's, KAI's on a tie), if one does.
    pub fn device_source(&self, i: usize) -> Option<u32> {
        if i >= DEVICES || self.each_set & (1 << i) == 0 {
            return None;
        }
        let usable = self.found & !self.failed;
        let hami = if self.hami[i] > 0 {
            Some((self.hami[i], source::HAMI_DEVICE))
        } else {
            (self.hami_all > 0).then_some((self.hami_all, source::HAMI))
        };
        let nvidia = (usable & source::bit(source::NVIDIA) != 0).then_some((self.nvidia, source::NVIDIA));
        let kai = (usable & source::bit(source::KAI) != 0).then_some((self.kai, source::KAI));
        [hami, nvidia, kai].into_iter().flatten().min_by_key(|&(v, _)| v).map(|(_, s)| s)
    }

    /// An environment that declares nothing, finished.
    pub fn default_finished(d: &Defaults) -> Self {
        let mut decl = Self::default();
        decl.finish(d);
        decl
    }

    /// Some limit of it is in force.
    pub const fn in_force(&self) -> bool {
        self.total.active != 0 || (self.each_set != 0 && self.each_error == 0)
    }
}

const _: () = {
    assert!(core::mem::size_of::<Declaration>() == 528);
    assert!(core::mem::size_of::<EnvConfig>() == 32);
};

#[cfg(feature = "user")]
// SAFETY: repr(C), integers only, no padding (size asserted above).
unsafe impl aya::Pod for EnvConfig {}

#[cfg(test)]
mod tests;
