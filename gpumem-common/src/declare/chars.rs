//! Bytes as the parsers see them: ASCII white space (C's `isspace`, which
//! is also what Rust's `str::trim` removes from ASCII text), digits, case,
//! and short words packed into a `u64` (first byte lowest) so that a word
//! is compared with one instruction.

/// Space, tab, newline, vertical tab, form feed, carriage return.
#[inline(always)]
pub const fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

#[inline(always)]
pub const fn is_digit(c: u8) -> bool {
    c.is_ascii_digit()
}

#[inline(always)]
pub const fn lower(c: u8) -> u8 {
    c.to_ascii_lowercase()
}

#[inline(always)]
pub const fn upper(c: u8) -> u8 {
    c.to_ascii_uppercase()
}

/// `word` (the first `len` bytes of a text, packed) with `c` appended;
/// bytes past the eighth are not kept (the length still counts them, so
/// no longer word compares equal to a packed one).
#[inline(always)]
pub const fn pack(word: u64, len: u32, c: u8) -> u64 {
    if len < 8 {
        word | ((c as u64) << (8 * len))
    } else {
        word
    }
}

/// A word of at most eight bytes, packed as [`pack`] packs it.
pub const fn packed(s: &str) -> u64 {
    let b = s.as_bytes();
    assert!(b.len() <= 8);
    let mut w = 0u64;
    let mut i = 0;
    while i < b.len() {
        w |= (b[i] as u64) << (8 * i);
        i += 1;
    }
    w
}

/// A packed word of `len` bytes is `s`.
#[inline(always)]
pub const fn is(word: u64, len: u32, s: &str) -> bool {
    len as usize == s.len() && word == packed(s)
}

/// `a * 10 + d`, or None past `u64::MAX`. (Compared with constants: LLVM
/// turns `a > u64::MAX / b` into a 128-bit multiply, which the BPF target
/// cannot do.)
#[inline(always)]
pub const fn push_digit(a: u64, d: u8) -> Option<u64> {
    const MOST: u64 = u64::MAX / 10;
    if a < MOST || (a == MOST && d as u64 <= u64::MAX % 10) {
        Some(a * 10 + d as u64)
    } else {
        None
    }
}

/// `i` masked to `n` entries (`n` a power of two), right where an array
/// is indexed. The value goes through memory so LLVM cannot drop the mask
/// on the strength of what it proved of `i` earlier: the kernel's
/// verifier, which loses such facts across a spill, must see it.
#[inline(always)]
pub fn bounded(i: usize, n: usize) -> usize {
    // SAFETY: reads a local.
    unsafe { core::ptr::read_volatile(&i) & (n - 1) }
}

/// `a / b` (0 for a zero `b`): a division with no panic path, which the
/// kernel's verifier would refuse as a jump to nowhere.
#[inline(always)]
pub const fn div(a: u64, b: u64) -> u64 {
    match a.checked_div(b) {
        Some(q) => q,
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_pack_and_compare() {
        let mut w = 0;
        for (i, c) in "signal".bytes().enumerate() {
            w = pack(w, i as u32, c);
        }
        assert!(is(w, 6, "signal"));
        assert!(!is(w, 7, "signal"));
        assert!(!is(w, 6, "signals"));
        // A ninth byte is not kept, but the length says it was there.
        let mut long = 0;
        for (i, c) in "fallbackx".bytes().enumerate() {
            long = pack(long, i as u32, c);
        }
        assert!(!is(long, 9, "fallback"));
        assert_eq!(long, packed("fallback"));
    }

    #[test]
    fn white_space_is_what_trim_removes_from_ascii() {
        for c in 0u8..128 {
            assert_eq!(is_space(c), (c as char).is_whitespace(), "{c:#x}");
        }
    }

    #[test]
    fn arithmetic_stops_at_the_top() {
        assert_eq!(push_digit(1844674407370955161, 5), Some(u64::MAX));
        assert_eq!(push_digit(1844674407370955161, 6), None);
        assert_eq!(push_digit(1844674407370955162, 0), None);
        assert_eq!(push_digit(12, 3), Some(123));
    }
}
