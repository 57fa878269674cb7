//! Short texts read trimmed: a keyword (`limit`, `driver`, a key such as
//! `soft`) and a device number, each one byte at a time.
use super::chars::{is, is_digit, is_space, pack};

const LEAD: u32 = 0;
const TEXT: u32 = 1;
const TAIL: u32 = 2;

/// A word without the white space around it: its first eight bytes
/// packed, its length, and whether white space stood inside it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WordParser {
    st: u32,
    split: u32,
    len: u32,
    /// Where the trimmed word starts and ends in the text fed.
    pub start: u32,
    pub end: u32,
    _pad: u32,
    word: u64,
}

impl WordParser {
    #[inline(always)]
    pub fn feed(&mut self, pos: u32, c: u8) {
        if is_space(c) {
            if self.st == TEXT {
                self.st = TAIL;
            }
            return;
        }
        if self.st == TAIL {
            self.split = 1;
        }
        if self.st == LEAD {
            self.start = pos;
        }
        self.st = TEXT;
        self.word = pack(self.word, self.len, c);
        self.len += 1;
        self.end = pos + 1;
    }

    /// The trimmed text is exactly `s` (at most eight bytes).
    #[inline(always)]
    pub fn is(&self, s: &str) -> bool {
        self.split == 0 && is(self.word, self.len, s)
    }
}

/// An unsigned 32-bit number as Rust's `u32::from_str` reads the trimmed
/// text: an optional `+`, then digits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct U32Parser {
    st: u32,
    bad: u32,
    len: u32,
    digits: u32,
    value: u64,
}

impl U32Parser {
    #[inline(always)]
    pub fn feed(&mut self, c: u8) {
        if is_space(c) {
            if self.st == TEXT {
                self.st = TAIL;
            }
            return;
        }
        if self.st == TAIL {
            self.bad = 1;
        }
        self.st = TEXT;
        if is_digit(c) {
            self.digits += 1;
            // Kept at most 2^33: past u32 either way.
            self.value = (self.value * 10 + (c - b'0') as u64).min(1 << 33);
        } else if !(c == b'+' && self.len == 0) {
            self.bad = 1;
        }
        self.len += 1;
    }

    #[inline(always)]
    pub fn finish(&self) -> Option<u32> {
        (self.bad == 0 && self.digits > 0 && self.value <= u32::MAX as u64).then_some(self.value as u32)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{U32Parser, WordParser};

    fn word(s: &str) -> WordParser {
        let mut w = WordParser::default();
        for (i, c) in s.bytes().enumerate() {
            w.feed(i as u32, c);
        }
        w
    }

    fn number(s: &str) -> Option<u32> {
        let mut n = U32Parser::default();
        s.bytes().for_each(|c| n.feed(c));
        n.finish()
    }

    #[test]
    fn words_are_trimmed_not_split() {
        let w = word("  limit ");
        assert!(w.is("limit"));
        assert_eq!((w.start, w.end), (2, 7));
        assert!(!word("lim it").is("limit"));
        assert!(!word("limits").is("limit"));
        assert!(word("").is(""));
    }

    proptest! {
        #[test]
        fn numbers_read_as_u32_from_str_reads_them(text in "[ ]?[+-]{0,2}[0-9]{0,11}[ a]?") {
            prop_assert_eq!(number(&text), text.trim().parse::<u32>().ok(), "{:?}", text);
        }
    }
}
