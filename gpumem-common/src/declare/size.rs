//! A size as `--limit`, the limits file and `GPUMEM_LIMIT` write it:
//! `4096`, `512MiB`, `8GiB`, `1.5G`, `2GB`. Binary units (`KiB` to `TiB`,
//! and the bare `K`, `M`, `G`, `T` as memory.max reads them) are powers of
//! 1024, decimal ones (`KB` to `TB`) powers of 1000, `B` or none bytes;
//! units in any case. A fraction has at most nine decimals and is computed
//! exactly (the kernel has no floating point), rounded half up. White
//! space may stand around the number and the unit. Zero is refused: a
//! zero limit is a mistake, not a policy.
use super::chars::{bounded, div, is, is_digit, is_space, lower, pack, push_digit};

/// Why a text is not a size, in the order they are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Nothing, or something other than a number, comes first.
    NoNumber,
    /// The unit is none of those above (its span in the parser).
    Unit,
    /// A number with two points, or a point alone.
    NotANumber,
    /// More than nine decimals.
    Decimals,
    /// More than `u64::MAX` bytes.
    TooLarge,
    Zero,
}

/// Decimals kept (and allowed) in a size.
pub const MAX_DECIMALS: u32 = 9;

const LEAD: u32 = 0;
const NUMBER: u32 = 1;
const GAP: u32 = 2;
const UNIT: u32 = 3;
const UNIT_GAP: u32 = 4;
const NO_NUMBER: u32 = 5;

/// `int` overflowed `u64`.
const OVERFLOW: u32 = 1;
/// White space inside the unit.
const SPLIT_UNIT: u32 = 2;

/// A size read one byte at a time ([`Self::feed`], then [`Self::finish`]);
/// all integers, so the kernel can keep it in a map and the zero value is
/// the start.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SizeParser {
    st: u32,
    flags: u32,
    digits: u32,
    points: u32,
    decimals: u32,
    unit_len: u32,
    int: u64,
    frac: u64,
    unit: u64,
    /// Where the unit starts and ends in the text fed (for a message).
    pub unit_start: u32,
    pub unit_end: u32,
}

impl SizeParser {
    /// Takes byte `c`, at position `pos` of the text.
    #[inline(always)]
    pub fn feed(&mut self, pos: u32, c: u8) {
        match self.st {
            LEAD if is_space(c) => {}
            LEAD if is_digit(c) || c == b'.' => {
                self.st = NUMBER;
                self.number(c);
            }
            LEAD => self.st = NO_NUMBER,
            NUMBER if is_digit(c) || c == b'.' => self.number(c),
            NUMBER | GAP if is_space(c) => self.st = GAP,
            NUMBER | GAP => {
                self.unit_start = pos;
                self.unit_char(pos, c);
            }
            UNIT | UNIT_GAP if is_space(c) => self.st = UNIT_GAP,
            UNIT_GAP => {
                self.flags |= SPLIT_UNIT;
                self.unit_char(pos, c);
            }
            UNIT => self.unit_char(pos, c),
            _ => {}
        }
    }

    #[inline(always)]
    fn number(&mut self, c: u8) {
        if c == b'.' {
            self.points += 1;
            return;
        }
        self.digits += 1;
        let d = c - b'0';
        if self.points == 0 {
            match push_digit(self.int, d) {
                Some(v) => self.int = v,
                None => self.flags |= OVERFLOW,
            }
        } else {
            self.decimals += 1;
            if self.decimals <= MAX_DECIMALS {
                self.frac = self.frac * 10 + d as u64;
            }
        }
    }

    #[inline(always)]
    fn unit_char(&mut self, pos: u32, c: u8) {
        self.st = UNIT;
        self.unit = pack(self.unit, self.unit_len, lower(c));
        self.unit_len += 1;
        self.unit_end = pos + 1;
    }

    /// The size in bytes, or why the text is not one.
    #[inline(always)]
    pub fn finish(&self) -> Result<u64, SizeError> {
        if self.st == LEAD || self.st == NO_NUMBER {
            return Err(SizeError::NoNumber);
        }
        let unit = if self.flags & SPLIT_UNIT != 0 { None } else { unit(self.unit, self.unit_len) };
        let Some(unit) = unit else { return Err(SizeError::Unit) };
        if self.points > 1 || self.digits == 0 {
            return Err(SizeError::NotANumber);
        }
        if self.decimals > MAX_DECIMALS {
            return Err(SizeError::Decimals);
        }
        if self.flags & OVERFLOW != 0 {
            return Err(SizeError::TooLarge);
        }
        let whole = unit.times(self.int).ok_or(SizeError::TooLarge)?;
        let part = unit.of_fraction(self.frac, self.decimals);
        if part > u64::MAX - whole {
            return Err(SizeError::TooLarge);
        }
        let bytes = whole + part;
        if bytes == 0 {
            return Err(SizeError::Zero);
        }
        Ok(bytes)
    }
}

/// A unit: a power of two or of ten.
#[derive(Clone, Copy)]
enum Unit {
    Binary(u32),
    Decimal(u32),
}

/// `base`^0 to `base`^15.
const fn powers(base: u64) -> [u64; 16] {
    let mut t = [1u64; 16];
    let mut i = 1;
    while i < 16 {
        t[i] = t[i - 1] * base;
        i += 1;
    }
    t
}

/// 5^k and 10^k.
const POW5: [u64; 16] = powers(5);
const POW10: [u64; 16] = powers(10);

/// u64::MAX / 10^k.
const MOST_OF_POW10: [u64; 16] = {
    let mut t = [0u64; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = u64::MAX / POW10[i];
        i += 1;
    }
    t
};

impl Unit {
    /// `n` of this unit in bytes, or None past `u64::MAX` (compared with
    /// tables: see `chars::push_digit`).
    #[inline(always)]
    fn times(self, n: u64) -> Option<u64> {
        match self {
            Unit::Binary(s) => (n <= u64::MAX >> (s & 63)).then(|| n << (s & 63)),
            Unit::Decimal(m) => {
                let m = bounded(m as usize, 16);
                (n <= MOST_OF_POW10[m]).then(|| n * POW10[bounded(m, 16)])
            }
        }
    }

    /// `frac` / 10^`k` of this unit, in bytes, rounded half up (`frac` <
    /// 10^`k`, `k` at most nine: every product fits in 64 bits).
    #[inline(always)]
    fn of_fraction(self, frac: u64, k: u32) -> u64 {
        let k = k & 15;
        if k == 0 {
            return 0;
        }
        // Every index through `bounded`: kernels before about 6.3 lose a
        // mask LLVM keeps only in a register it then spills.
        let pow10 = |e: u32| POW10[bounded(e as usize, 16)];
        match self {
            // frac * 2^s / 10^k = frac * 2^(s-k) / 5^k.
            Unit::Binary(s) if s >= k => {
                let (x, d) = (frac << ((s - k) & 63), POW5[bounded(k as usize, 16)]);
                div(2 * x + d, 2 * d)
            }
            Unit::Binary(_) => div(2 * frac + pow10(k), 2 * pow10(k)),
            Unit::Decimal(m) if m >= k => frac * pow10(m - k),
            Unit::Decimal(m) => {
                let d = pow10(k - m);
                div(2 * frac + d, 2 * d)
            }
        }
    }
}

/// The unit a packed, lower-cased word of `len` bytes names.
#[inline(always)]
fn unit(w: u64, len: u32) -> Option<Unit> {
    Some(if len == 0 || is(w, len, "b") {
        Unit::Binary(0)
    } else if is(w, len, "k") || is(w, len, "kib") {
        Unit::Binary(10)
    } else if is(w, len, "m") || is(w, len, "mib") {
        Unit::Binary(20)
    } else if is(w, len, "g") || is(w, len, "gib") {
        Unit::Binary(30)
    } else if is(w, len, "t") || is(w, len, "tib") {
        Unit::Binary(40)
    } else if is(w, len, "kb") {
        Unit::Decimal(3)
    } else if is(w, len, "mb") {
        Unit::Decimal(6)
    } else if is(w, len, "gb") {
        Unit::Decimal(9)
    } else if is(w, len, "tb") {
        Unit::Decimal(12)
    } else {
        return None;
    })
}

/// Parses a whole text as a size (what the agent does with `--limit` and
/// the file; the kernel feeds the parser itself).
pub fn parse(text: &[u8]) -> (Result<u64, SizeError>, SizeParser) {
    let mut p = SizeParser::default();
    for (i, &c) in text.iter().enumerate() {
        p.feed(i as u32, c);
    }
    (p.finish(), p)
}

#[cfg(test)]
mod tests;
