//! One environment string read for what it declares: which variable it
//! is (`names`), its value through that variable's parser, and what that
//! adds to the environment's [`Declaration`]. The kernel feeds the value
//! one byte per `bpf_loop` iteration ([`Reader::feed`]); the agent, for a
//! process already running, the whole string at once ([`read_string`]).
use super::{
    declaration::{Declaration, Defaults, TEXT_BYTES},
    hami::HamiParser,
    mib::MibParser,
    names::{self, source, Var},
    rule::{error, RuleError, RuleParser},
    CAP,
};

/// The parsers of one value, and which variable it is. All integers, the
/// zero value the start (the kernel zeroes it in its map).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reader {
    pub source: u32,
    pub device: u32,
    /// The value's first byte in the string, and the string's length.
    pub start: u32,
    pub len: u32,
    pub rule: RuleParser,
    pub hami: HamiParser,
    pub mib: MibParser,
}

impl Reader {
    /// Which of `var`'s parsers byte `i` of its value goes to (`decl`
    /// keeps `GPUMEM_LIMIT`'s text for the agent's messages).
    #[inline(always)]
    pub fn feed(&mut self, i: u32, c: u8, decl: &mut Declaration) {
        match self.source {
            source::GPUMEM => {
                self.rule.feed(c);
                if (i as usize) < TEXT_BYTES {
                    decl.text[super::chars::bounded(i as usize, TEXT_BYTES)] = c;
                }
            }
            source::HAMI | source::HAMI_DEVICE => self.hami.feed(c),
            _ => self.mib.feed(c),
        }
    }

    /// The value read: what it adds to `decl`.
    #[inline(always)]
    pub fn finish(&mut self, decl: &mut Declaration, d: &Defaults) {
        match self.source {
            source::GPUMEM => {
                decl.text_len = (self.len - self.start).min(TEXT_BYTES as u32);
                let read = self.rule.finish();
                decl.add_rule(read, d);
            }
            source::HAMI => decl.add_hami(None, self.hami.finish()),
            source::HAMI_DEVICE => decl.add_hami(Some(self.device), self.hami.finish()),
            other => decl.add_mib(other, self.mib.finish()),
        }
    }

    /// Starts reading variable `var`, in a string of `len` bytes.
    #[inline(always)]
    pub fn start(&mut self, var: Var, len: u32) {
        (self.source, self.device, self.start, self.len) = (var.source, var.device, var.value_start, len);
    }
}

/// The variable in `buf`'s first `len` bytes, if it is one `honour`
/// names; a `GPUMEM_LIMIT` that may have been cut at the buffer's end is
/// refused in `decl` (never read in part), and None.
#[inline(always)]
pub fn identify(
    buf: &[u8; CAP],
    len: usize,
    honour: u32,
    decl: &mut Declaration,
    d: &Defaults,
) -> Option<Var> {
    let var = names::identify(buf, len)?;
    if honour & source::bit(var.source) == 0 {
        return None;
    }
    if len + 1 >= CAP {
        if var.source == source::GPUMEM {
            decl.add_rule(Err(RuleError { code: error::TOO_LONG, ..RuleError::default() }), d);
        }
        return None;
    }
    Some(var)
}

/// One whole environment string (the agent's reading of a running
/// process's environment): what it declares goes into `decl`.
pub fn read_string(decl: &mut Declaration, s: &[u8], honour: u32, d: &Defaults) {
    let mut buf = [0u8; CAP];
    let len = s.len().min(CAP - 1);
    buf[..len].copy_from_slice(&s[..len]);
    let Some(var) = identify(&buf, len, honour, decl, d) else { return };
    let mut r = Reader::default();
    r.start(var, len as u32);
    for (i, &c) in s[var.value_start as usize..].iter().enumerate() {
        r.feed(i as u32, c, decl);
    }
    r.finish(decl, d);
}

/// A whole environment (`NAME=value` strings) read as the kernel reads a
/// new image's: what it declares.
pub fn read_environment<'a>(
    strings: impl Iterator<Item = &'a [u8]>,
    honour: u32,
    d: &Defaults,
) -> Declaration {
    let mut decl = Declaration::default();
    for s in strings {
        read_string(&mut decl, s, honour, d);
    }
    decl.finish(d);
    decl
}

#[cfg(test)]
mod tests {
    use super::{read_environment, Reader};
    use crate::{
        declare::{
            action::ActionParser,
            declaration::{Declaration, Defaults},
            names::{honour, source},
            rule::{error, RuleParser},
            size::SizeParser,
        },
        maps::limit_action,
    };

    const KILL: Defaults =
        Defaults { action: limit_action::SIGNAL, signal: 9, can_deny: false, view_ok: false, cap: 0 };

    fn env(strings: &[&str], honour: u32) -> Declaration {
        read_environment(strings.iter().map(|s| s.as_bytes()), honour, &KILL)
    }

    #[test]
    fn an_environment_reads_as_its_variables_say() {
        let d = env(
            &["PATH=/bin", "GPUMEM_LIMIT=64MiB", "CUDA_DEVICE_MEMORY_LIMIT_1=32m", "HOME=/root"],
            honour::ALL,
        );
        assert_eq!((d.total.hard, d.each[1], d.each_set), (64 << 20, 32 << 20, 0b10));
        assert_eq!(&d.text[..d.text_len as usize], b"64MiB");
        // Not honoured: not read.
        let d =
            env(&["GPUMEM_LIMIT=64MiB", "CUDA_DEVICE_MEMORY_LIMIT_1=32m"], honour::CUDA_DEVICE_MEMORY_LIMIT);
        assert_eq!((d.found, d.total.active), (source::bit(source::HAMI_DEVICE), 0));
        assert_eq!(env(&["GPUMEM_LIMIT=64MiB"], 0), Declaration::default_finished(&KILL));
    }

    #[test]
    fn a_value_past_the_buffer_is_refused_not_cut() {
        let long = std::format!("GPUMEM_LIMIT=64MiB{}", " ".repeat(300));
        let d = env(&[&long], honour::ALL);
        assert_eq!((d.total.active, d.error.code), (0, error::TOO_LONG));
    }

    /// The kernel zeroes these in its map to start them: their zero value
    /// must be their start.
    #[test]
    fn parsers_start_from_zero() {
        // SAFETY: plain integers, where all zeros is a value.
        unsafe {
            assert_eq!(core::mem::zeroed::<Reader>(), Reader::default());
            assert_eq!(core::mem::zeroed::<RuleParser>(), RuleParser::default());
            assert_eq!(core::mem::zeroed::<SizeParser>(), SizeParser::default());
            assert_eq!(core::mem::zeroed::<ActionParser>(), ActionParser::default());
            assert_eq!(core::mem::zeroed::<Declaration>(), Declaration::default());
        }
    }
}
