//! A signal as `action=signal:SIG` names it: `SIGTERM`, `TERM`, `term` or
//! a number from 1 to 64 (real-time signals by number). The names are
//! Linux's on x86-64, the ones the agent's `nix` knows (a unit test holds
//! the two lists together).
use super::chars::{is_digit, is_space, pack, upper};

/// Why a text is not a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalError {
    /// A number (an `i32`) outside 1 to 64.
    Range(i32),
    /// Neither such a number nor a name.
    Unknown,
}

/// The signals by name (without `SIG`), packed, with their numbers.
pub const NAMES: [(&str, u32); 31] = [
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("PWR", 30),
    ("SYS", 31),
];

const PACKED: [(u64, u32, u32); 31] = {
    let mut t = [(0u64, 0u32, 0u32); 31];
    let mut i = 0;
    while i < 31 {
        t[i] = (super::chars::packed(NAMES[i].0), NAMES[i].0.len() as u32, NAMES[i].1);
        i += 1;
    }
    t
};

const LEAD: u32 = 0;
const TEXT: u32 = 1;
const TAIL: u32 = 2;

/// Something other than a sign and digits.
const NOT_NUMBER: u32 = 1;
/// White space inside the text.
const SPLIT: u32 = 2;
/// A leading minus.
const NEGATIVE: u32 = 4;

/// A signal read one byte at a time (see [`super::size::SizeParser`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SignalParser {
    st: u32,
    flags: u32,
    len: u32,
    digits: u32,
    value: u64,
    /// The text upper-cased, packed, and the same from its fourth byte on.
    full: u64,
    after_sig: u64,
}

impl SignalParser {
    #[inline(always)]
    pub fn feed(&mut self, c: u8) {
        match self.st {
            LEAD | TAIL if is_space(c) => {}
            TEXT if is_space(c) => self.st = TAIL,
            LEAD | TEXT => self.char(c),
            _ => {
                self.flags |= SPLIT;
                self.char(c);
            }
        }
    }

    #[inline(always)]
    fn char(&mut self, c: u8) {
        self.st = TEXT;
        if self.len == 0 && (c == b'+' || c == b'-') {
            if c == b'-' {
                self.flags |= NEGATIVE;
            }
        } else if is_digit(c) {
            self.digits += 1;
            // Kept at most 2^32: past i32 either way.
            self.value = (self.value * 10 + (c - b'0') as u64).min(1 << 32);
        } else {
            self.flags |= NOT_NUMBER;
        }
        let u = upper(c);
        self.full = pack(self.full, self.len, u);
        if self.len >= 3 {
            self.after_sig = pack(self.after_sig, self.len - 3, u);
        }
        self.len += 1;
    }

    /// The signal's number, or why the text is not one: a sign and digits
    /// are read as an `i32` (then 1 to 64), anything else as a name.
    #[inline(always)]
    pub fn finish(&self) -> Result<u32, SignalError> {
        let numeric = self.flags & (NOT_NUMBER | SPLIT) == 0 && self.digits > 0;
        let negative = self.flags & NEGATIVE != 0;
        let most = if negative { 1 << 31 } else { i32::MAX as u64 };
        if numeric && self.value <= most {
            let n = if negative { (self.value as i64).wrapping_neg() as i32 } else { self.value as i32 };
            return if (1..=64).contains(&n) { Ok(n as u32) } else { Err(SignalError::Range(n)) };
        }
        self.name()
    }

    #[inline(always)]
    fn name(&self) -> Result<u32, SignalError> {
        if self.flags & SPLIT != 0 {
            return Err(SignalError::Unknown);
        }
        let sig = self.len >= 3 && self.full & 0xff_ffff == super::chars::packed("SIG");
        let (word, len) = if sig { (self.after_sig, self.len - 3) } else { (self.full, self.len) };
        let mut i = 0;
        while i < PACKED.len() {
            let (w, l, n) = PACKED[i];
            if w == word && l == len {
                return Ok(n);
            }
            i += 1;
        }
        Err(SignalError::Unknown)
    }
}

/// Parses a whole text as a signal.
pub fn parse(text: &[u8]) -> Result<u32, SignalError> {
    let mut p = SignalParser::default();
    for &c in text {
        p.feed(c);
    }
    p.finish()
}

#[cfg(test)]
mod tests {
    use std::string::String;

    use proptest::prelude::*;

    use super::{parse, SignalError, NAMES};

    /// The agent's parser before the kernel shared it.
    fn reference(text: &str) -> Result<u32, SignalError> {
        let t = text.trim();
        if let Ok(n) = t.parse::<i32>() {
            return if (1..=64).contains(&n) { Ok(n as u32) } else { Err(SignalError::Range(n)) };
        }
        let upper = t.to_ascii_uppercase();
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        NAMES.iter().find(|(n, _)| *n == name).map(|&(_, n)| n).ok_or(SignalError::Unknown)
    }

    #[test]
    fn names_and_numbers() {
        assert_eq!(parse(b"SIGTERM"), Ok(15));
        assert_eq!(parse(b"TERM"), Ok(15));
        assert_eq!(parse(b" sigusr1 "), Ok(10));
        assert_eq!(parse(b"10"), Ok(10));
        assert_eq!(parse(b"+15"), Ok(15));
        assert_eq!(parse(b"64"), Ok(64));
        assert_eq!(parse(b"SIGSTKFLT"), Ok(16));
        assert_eq!(parse(b"65"), Err(SignalError::Range(65)));
        assert_eq!(parse(b"0"), Err(SignalError::Range(0)));
        assert_eq!(parse(b"-3"), Err(SignalError::Range(-3)));
        assert_eq!(parse(b"-2147483648"), Err(SignalError::Range(i32::MIN)));
        for bad in
            ["", "SIG", "SIGFOO", "SIGSIGTERM", "SIG TERM", "99999999999", "+", "15x", "-", "2147483648"]
        {
            assert_eq!(parse(bad.as_bytes()), Err(SignalError::Unknown), "{bad:?}");
        }
    }

    #[test]
    fn the_names_are_nix_s() {
        use core::str::FromStr;
        for (name, n) in NAMES {
            let sig = nix::sys::signal::Signal::from_str(&std::format!("SIG{name}")).unwrap();
            assert_eq!(sig as u32, n, "{name}");
        }
        assert_eq!(nix::sys::signal::Signal::iterator().count(), NAMES.len());
    }

    proptest! {
        #[test]
        fn agrees_with_the_earlier_parser(text in "[ ]?(SIG|sig|Sig)?[A-Za-z0-9+-]{0,7}[ ]?") {
            prop_assert_eq!(parse(text.as_bytes()), reference(&text), "{:?}", text);
        }

        #[test]
        fn any_number_agrees(n in any::<i64>(), pad in "[ \t]{0,2}") {
            let text: String = std::format!("{pad}{n}{pad}");
            prop_assert_eq!(parse(text.as_bytes()), reference(&text));
        }
    }
}
