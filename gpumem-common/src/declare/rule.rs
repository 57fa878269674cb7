//! A rule's right-hand side, `HARD[,soft=SIZE][,action=A][,fallback=A]
//! [,device=N][,view=V]`: what `--limit TARGET=...` and `GPUMEM_LIMIT`
//! both say, read one byte at a time. Fields are split at commas; the
//! first is the hard limit, each other is `KEY=VALUE` (the key trimmed, a
//! later key overriding an earlier one). The first error, in the order
//! of the text, stops the reading; the rule is then checked whole.
use super::{
    action::{ActionError, ActionParser},
    size::{SizeError, SizeParser},
    word::{U32Parser, WordParser},
};
use crate::maps::{limit_action, DEVICE_ANY};

/// What a rule's text says; 0 where it says nothing (so the zero value,
/// which the kernel starts from, says nothing at all).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleText {
    pub hard: u64,
    pub soft: u64,
    /// A `limit_action` code, and its signal.
    pub action: u32,
    pub signal: u32,
    pub fallback: u32,
    pub fallback_signal: u32,
    /// 1 where `device` names the one device counted.
    pub has_device: u32,
    pub device: u32,
    /// One of [`view`].
    pub view: u32,
    pub _pad: u32,
}

impl RuleText {
    /// The device counted, or `DEVICE_ANY`.
    pub const fn device(&self) -> u32 {
        if self.has_device != 0 {
            self.device
        } else {
            DEVICE_ANY
        }
    }
}

/// `RuleText::view`.
pub mod view {
    pub const UNSET: u32 = 0;
    pub const LIMIT: u32 = 1;
    pub const DRIVER: u32 = 2;
}

/// Why a rule's text was refused: what, and where (byte offsets into the
/// text); `code` 0 when it was not.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct RuleError {
    /// One of [`error`].
    pub code: u32,
    /// The text the error is about: a size, a value, a field or a key.
    pub start: u32,
    pub end: u32,
    /// A size's unit.
    pub aux_start: u32,
    pub aux_end: u32,
    /// The signal number out of range.
    pub number: i32,
}

/// `RuleError::code`.
pub mod error {
    pub const NONE: u32 = 0;
    pub const SIZE_NO_NUMBER: u32 = 1;
    pub const SIZE_UNIT: u32 = 2;
    pub const SIZE: u32 = 3;
    pub const SIZE_DECIMALS: u32 = 4;
    pub const SIZE_TOO_LARGE: u32 = 5;
    pub const SIZE_ZERO: u32 = 6;
    pub const ACTION: u32 = 7;
    pub const SIGNAL_RANGE: u32 = 8;
    pub const SIGNAL: u32 = 9;
    pub const KEY_VALUE: u32 = 10;
    pub const DEVICE: u32 = 11;
    pub const VIEW: u32 = 12;
    pub const UNKNOWN_KEY: u32 = 13;
    pub const SOFT_NOT_BELOW_HARD: u32 = 14;
    pub const FALLBACK_IS_DENY: u32 = 15;
    pub const FALLBACK_WITHOUT_DENY: u32 = 16;
    /// The text does not fit the kernel's buffer (environment only).
    pub const TOO_LONG: u32 = 17;
    /// `deny` (named, or the default) where this kernel cannot deny,
    /// with no fallback.
    pub const DENY_UNSUPPORTED: u32 = 18;
    /// `view=limit` where this kernel cannot tell a process its view.
    pub const VIEW_UNSUPPORTED: u32 = 19;

    /// A size's error as a rule's.
    #[inline(always)]
    pub const fn of_size(e: super::SizeError) -> u32 {
        use super::SizeError as E;
        match e {
            E::NoNumber => SIZE_NO_NUMBER,
            E::Unit => SIZE_UNIT,
            E::NotANumber => SIZE,
            E::Decimals => SIZE_DECIMALS,
            E::TooLarge => SIZE_TOO_LARGE,
            E::Zero => SIZE_ZERO,
        }
    }
}

const HARD: u32 = 0;
const KEY: u32 = 1;
const VALUE: u32 = 2;
const FAILED: u32 = 3;

/// The key a field's value belongs to.
const SOFT: u32 = 1;
const ACTION: u32 = 2;
const FALLBACK: u32 = 3;
const DEVICE: u32 = 4;
const VIEW: u32 = 5;

/// A rule's text read one byte at a time ([`Self::feed`], then
/// [`Self::finish`]); integers only, zero the start (the kernel keeps it
/// in a map between bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleParser {
    pos: u32,
    phase: u32,
    kind: u32,
    field_start: u32,
    value_start: u32,
    _pad: u32,
    key: WordParser,
    value: WordParser,
    size: SizeParser,
    action: ActionParser,
    number: U32Parser,
    pub out: RuleText,
    pub err: RuleError,
}

impl RuleParser {
    #[inline(always)]
    pub fn feed(&mut self, c: u8) {
        let pos = self.pos;
        self.pos += 1;
        if self.phase == FAILED {
            return;
        }
        if c == b',' {
            self.end_field();
            if self.phase != FAILED {
                self.phase = KEY;
                self.field_start = pos + 1;
                self.key = WordParser::default();
            }
            return;
        }
        match self.phase {
            HARD => self.size.feed(pos, c),
            KEY if c == b'=' => self.start_value(pos + 1),
            KEY => self.key.feed(pos, c),
            _ => self.feed_value(pos, c),
        }
    }

    /// The key is complete: what its value is, or an unknown key.
    #[inline(always)]
    fn start_value(&mut self, at: u32) {
        let k = &self.key;
        let kind = if k.is("soft") {
            SOFT
        } else if k.is("action") {
            ACTION
        } else if k.is("fallback") {
            FALLBACK
        } else if k.is("device") {
            DEVICE
        } else if k.is("view") {
            VIEW
        } else {
            let (start, end) =
                if k.end > k.start { (k.start, k.end) } else { (self.field_start, self.field_start) };
            return self.fail(error::UNKNOWN_KEY, start, end);
        };
        self.phase = VALUE;
        self.kind = kind;
        self.value_start = at;
        self.value = WordParser::default();
        self.size = SizeParser::default();
        self.action = ActionParser::default();
        self.number = U32Parser::default();
    }

    #[inline(always)]
    fn feed_value(&mut self, pos: u32, c: u8) {
        match self.kind {
            SOFT => self.size.feed(pos, c),
            ACTION | FALLBACK => self.action.feed(c),
            DEVICE => self.number.feed(c),
            _ => self.value.feed(pos, c),
        }
    }

    /// A field ends (a comma, or the end of the text).
    #[inline(always)]
    fn end_field(&mut self) {
        let (start, end) = (self.value_start, self.pos - 1);
        match self.phase {
            HARD => match self.size.finish() {
                Ok(bytes) => self.out.hard = bytes,
                Err(e) => self.size_error(e, self.field_start, end),
            },
            KEY => self.fail(error::KEY_VALUE, self.field_start, end),
            VALUE => self.end_value(start, end),
            _ => {}
        }
    }

    #[inline(always)]
    fn end_value(&mut self, start: u32, end: u32) {
        match self.kind {
            SOFT => match self.size.finish() {
                Ok(bytes) => self.out.soft = bytes,
                Err(e) => self.size_error(e, start, end),
            },
            ACTION | FALLBACK => match self.action.finish() {
                Ok((a, s)) if self.kind == ACTION => (self.out.action, self.out.signal) = (a, s),
                Ok((a, s)) => (self.out.fallback, self.out.fallback_signal) = (a, s),
                Err(ActionError::Action) => self.fail(error::ACTION, start, end),
                Err(ActionError::Signal) => self.fail(error::SIGNAL, start, end),
                Err(ActionError::SignalRange(n)) => {
                    self.fail(error::SIGNAL_RANGE, start, end);
                    self.err.number = n;
                }
            },
            DEVICE => match self.number.finish() {
                Some(d) => (self.out.has_device, self.out.device) = (1, d),
                None => self.fail(error::DEVICE, start, end),
            },
            _ if self.value.is("limit") => self.out.view = view::LIMIT,
            _ if self.value.is("driver") => self.out.view = view::DRIVER,
            _ => self.fail(error::VIEW, start, end),
        }
    }

    #[inline(always)]
    fn size_error(&mut self, e: SizeError, start: u32, end: u32) {
        self.fail(error::of_size(e), start, end);
        (self.err.aux_start, self.err.aux_end) = (self.size.unit_start, self.size.unit_end);
    }

    #[inline(always)]
    fn fail(&mut self, code: u32, start: u32, end: u32) {
        self.phase = FAILED;
        self.err = RuleError { code, start, end, aux_start: 0, aux_end: 0, number: 0 };
    }

    /// The rule, or the first thing wrong with it.
    #[inline(always)]
    pub fn finish(&mut self) -> Result<RuleText, RuleError> {
        self.pos += 1;
        self.end_field();
        if self.phase == FAILED {
            return Err(self.err);
        }
        let o = &self.out;
        let code = if o.soft != 0 && o.soft >= o.hard {
            error::SOFT_NOT_BELOW_HARD
        } else if o.fallback == limit_action::DENY {
            error::FALLBACK_IS_DENY
        } else if o.fallback != 0 && o.action != limit_action::DENY {
            error::FALLBACK_WITHOUT_DENY
        } else {
            return Ok(self.out);
        };
        self.fail(code, 0, self.pos - 1);
        Err(self.err)
    }
}

/// Parses a whole text as a rule's right-hand side.
pub fn parse(text: &[u8]) -> Result<RuleText, RuleError> {
    let mut p = RuleParser::default();
    for &c in text {
        p.feed(c);
    }
    p.finish()
}

#[cfg(test)]
mod tests;
