//! What a limit does to a call that would cross it: `audit`, `deny`,
//! `signal` (SIGKILL) or `signal:SIG`, read one byte at a time.
use super::{
    chars::{is, is_space, pack},
    signal::{SignalError, SignalParser},
};
use crate::maps::limit_action;

/// Why a text is not an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionError {
    /// Not one of the forms above.
    Action,
    /// `signal:N` with N outside 1 to 64.
    SignalRange(i32),
    /// `signal:NAME` with a name no signal has.
    Signal,
}

const LEAD: u32 = 0;
const WORD: u32 = 1;
const WORD_TAIL: u32 = 2;
const SIGNAL: u32 = 3;

/// An action: the word before the first `:` (which must be `signal`,
/// nothing between them), then the signal.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActionParser {
    st: u32,
    bad: u32,
    colon: u32,
    len: u32,
    word: u64,
    signal: SignalParser,
}

impl ActionParser {
    #[inline(always)]
    pub fn feed(&mut self, c: u8) {
        match self.st {
            SIGNAL => self.signal.feed(c),
            _ if c == b':' => {
                // Text between the word and the colon: not `signal`.
                if self.st == WORD_TAIL {
                    self.bad = 1;
                }
                self.colon = 1;
                self.st = SIGNAL;
            }
            LEAD if is_space(c) => {}
            WORD | WORD_TAIL if is_space(c) => self.st = WORD_TAIL,
            _ => {
                if self.st == WORD_TAIL {
                    self.bad = 1;
                }
                self.st = WORD;
                self.word = pack(self.word, self.len, c);
                self.len += 1;
            }
        }
    }

    /// The action (a `limit_action` code) and its signal (0 but for
    /// `signal`), or why the text is not one.
    #[inline(always)]
    pub fn finish(&self) -> Result<(u32, u32), ActionError> {
        let word = |s| self.bad == 0 && is(self.word, self.len, s);
        if self.colon != 0 {
            if !word("signal") {
                return Err(ActionError::Action);
            }
            return match self.signal.finish() {
                Ok(n) => Ok((limit_action::SIGNAL, n)),
                Err(SignalError::Range(n)) => Err(ActionError::SignalRange(n)),
                Err(SignalError::Unknown) => Err(ActionError::Signal),
            };
        }
        if word("audit") {
            Ok((limit_action::AUDIT, 0))
        } else if word("deny") {
            Ok((limit_action::DENY, 0))
        } else if word("signal") {
            Ok((limit_action::SIGNAL, 9))
        } else {
            Err(ActionError::Action)
        }
    }
}

/// Parses a whole text as an action.
pub fn parse(text: &[u8]) -> Result<(u32, u32), ActionError> {
    let mut p = ActionParser::default();
    for &c in text {
        p.feed(c);
    }
    p.finish()
}

#[cfg(test)]
mod tests {
    use super::{parse, ActionError};
    use crate::maps::limit_action::{AUDIT, DENY, SIGNAL};

    #[test]
    fn actions_and_signals() {
        assert_eq!(parse(b"signal"), Ok((SIGNAL, 9)));
        assert_eq!(parse(b" audit "), Ok((AUDIT, 0)));
        assert_eq!(parse(b"deny"), Ok((DENY, 0)));
        assert_eq!(parse(b"signal:TERM"), Ok((SIGNAL, 15)));
        assert_eq!(parse(b"signal: TERM "), Ok((SIGNAL, 15)));
        assert_eq!(parse(b"signal:10"), Ok((SIGNAL, 10)));
        assert_eq!(parse(b"signal:sigusr1"), Ok((SIGNAL, 10)));
        assert_eq!(parse(b"signal:SIGFOO"), Err(ActionError::Signal));
        assert_eq!(parse(b"signal:"), Err(ActionError::Signal));
        assert_eq!(parse(b"signal:65"), Err(ActionError::SignalRange(65)));
        for bad in ["kill", "", "Signal", "signal :TERM", "sig nal", "deny x", "audit:1", ":9", "den y"] {
            assert_eq!(parse(bad.as_bytes()), Err(ActionError::Action), "{bad:?}");
        }
    }
}
