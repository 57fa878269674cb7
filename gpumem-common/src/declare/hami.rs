//! `CUDA_DEVICE_MEMORY_LIMIT[_i]` read as HAMi-core reads it
//! (`get_limit_from_env`, src/multiprocess/multiprocess_memory_limit.c):
//!
//! ```c
//! if (env_limit[len - 1] == 'G' || env_limit[len - 1] == 'g') { scalar = 1024 * 1024 * 1024; } ...
//! size_t res = strtoul(env_limit, &digit_end, 0);
//! size_t scaled_res = res * scalar;
//! if (scaled_res == 0) { ... return 0; }
//! if (scaled_res != 0 && scaled_res / scalar != res) { ... return 0; }
//! ```
//!
//! So the unit is the text's last character only (`g`, `m`, `k` in
//! either case; anything else: bytes), the number is what `strtoul` with
//! base 0 reads from the start (white space, a sign, `0x` hexadecimal, a
//! leading `0` octal; it stops at the first other character), and 0, like
//! an overflow of the multiplication, means no limit. `1.5g` is 1 GiB,
//! `1gb` one byte, `-1` 2^64 - 1 bytes.
use super::chars::{div, is_space};

const LEAD: u32 = 0;
const SIGNED: u32 = 1;
const ZERO: u32 = 2;
const ZERO_X: u32 = 3;
const DIGITS: u32 = 4;
const STOPPED: u32 = 5;

/// HAMi-core's reading, one byte at a time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HamiParser {
    st: u32,
    base: u32,
    negative: u32,
    overflow: u32,
    len: u32,
    last: u32,
    value: u64,
}

impl HamiParser {
    #[inline(always)]
    pub fn feed(&mut self, c: u8) {
        self.len += 1;
        self.last = c as u32;
        match self.st {
            LEAD if is_space(c) => {}
            LEAD if c == b'+' || c == b'-' => {
                self.negative = u32::from(c == b'-');
                self.st = SIGNED;
            }
            LEAD | SIGNED if c == b'0' => self.st = ZERO,
            LEAD | SIGNED => self.start(10, c),
            ZERO if c == b'x' || c == b'X' => self.st = ZERO_X,
            ZERO => self.start(8, c),
            ZERO_X => self.start(16, c),
            DIGITS => self.digit(c),
            _ => {}
        }
    }

    #[inline(always)]
    fn start(&mut self, base: u32, c: u8) {
        self.base = base;
        self.st = DIGITS;
        self.digit(c);
    }

    #[inline(always)]
    fn digit(&mut self, c: u8) {
        let d = match c {
            b'0'..=b'9' => (c - b'0') as u64,
            b'a'..=b'f' => (c - b'a' + 10) as u64,
            b'A'..=b'F' => (c - b'A' + 10) as u64,
            _ => 99,
        };
        let base = self.base as u64;
        if d >= base {
            self.st = STOPPED;
            return;
        }
        if self.value > div(u64::MAX - d, base) {
            self.overflow = 1;
        } else {
            self.value = self.value * base + d;
        }
    }

    /// The limit in bytes, 0 for none.
    #[inline(always)]
    pub fn finish(&self) -> u64 {
        if self.len == 0 {
            return 0;
        }
        let scalar: u64 = match self.last as u8 {
            b'g' | b'G' => 1 << 30,
            b'm' | b'M' => 1 << 20,
            b'k' | b'K' => 1 << 10,
            _ => 1,
        };
        // strtoul: ULONG_MAX past the range, whatever the sign.
        let res = if self.overflow != 0 {
            u64::MAX
        } else if self.negative != 0 {
            self.value.wrapping_neg()
        } else {
            self.value
        };
        let scaled = res.wrapping_mul(scalar);
        if scaled == 0 || div(scaled, scalar) != res {
            return 0;
        }
        scaled
    }
}

/// Reads a whole text as HAMi-core does.
pub fn parse(text: &[u8]) -> u64 {
    let mut p = HamiParser::default();
    text.iter().for_each(|&c| p.feed(c));
    p.finish()
}

#[cfg(test)]
mod tests {
    use super::parse;

    /// HAMi-core's `get_limit_from_env`, compiled and run on these inputs.
    #[test]
    fn reads_as_hami_core_does() {
        const G: u64 = 1 << 30;
        for (text, want) in [
            ("1g", G),
            ("1024m", G),
            ("1048576k", G),
            ("1073741824", G),
            ("0x1g", G),
            (" 1g", G),
            ("1 g", G),
            ("1000m", 1_048_576_000),
            ("1.5g", G),
            ("010m", 8 << 20),
            ("0x10m", 16 << 20),
            ("1gb", 1),
            ("1Gi", 1),
            ("1GiB", 1),
            ("1t", 1),
            ("1e9", 1),
            ("1M\n", 1),
            ("1,000m", 1 << 20),
            ("2mm", 2 << 20),
            ("+2m", 2 << 20),
            ("-1", u64::MAX),
            ("99999999999999999999", u64::MAX),
            ("-1m", 0),
            ("17179869184g", 0),
            ("g", 0),
            ("abc", 0),
            ("0", 0),
            ("0g", 0),
            ("", 0),
            ("0x", 0),
            ("09", 0),
            ("3000m", 3000 << 20),
        ] {
            assert_eq!(parse(text.as_bytes()), want, "{text:?}");
        }
    }
}
