//! A rule's right-hand side (`HARD[,soft=..][,action=..]...`) read with
//! the parser the kernel reads `GPUMEM_LIMIT` with
//! (`gpumem_common::declare::rule`), and its refusals told as the user
//! wrote them.
use gpumem_common::declare::rule::{error, RuleError, RuleParser, RuleText};

use super::error::SpecError;

/// Reads `rhs`, the part of `whole` after its target; `target` names the
/// rule in the errors that need one.
pub fn read(rhs: &str, target: &str, whole: &str) -> Result<RuleText, SpecError> {
    let mut p = RuleParser::default();
    rhs.bytes().for_each(|c| p.feed(c));
    let read = p.finish();
    read.map_err(|e| told(rhs, target, whole, &e, &p.out))
}

/// What a refusal of the right-hand side `rhs` says: the part it is about
/// (`e`'s span), and for the whole-rule checks the numbers (`out`, what
/// had been read).
pub fn told(rhs: &str, target: &str, whole: &str, e: &RuleError, out: &RuleText) -> SpecError {
    let span = |a: u32, b: u32| rhs.get(a as usize..b as usize).unwrap_or_default().to_string();
    let part = span(e.start, e.end);
    let (target, whole) = (target.to_string(), whole.to_string());
    match e.code {
        error::SIZE_NO_NUMBER => SpecError::SizeWithoutNumber(part),
        error::SIZE_UNIT => {
            SpecError::SizeUnit { text: part, unit: span(e.aux_start, e.aux_end).to_ascii_lowercase() }
        }
        error::SIZE => SpecError::Size(part),
        error::SIZE_DECIMALS => SpecError::SizeDecimals(part),
        error::SIZE_TOO_LARGE => SpecError::SizeTooLarge(part),
        error::SIZE_ZERO => SpecError::SizeZero(part),
        error::ACTION => SpecError::Action(part),
        error::SIGNAL_RANGE => SpecError::SignalRange(e.number),
        error::SIGNAL => {
            SpecError::Signal(part.split_once(':').map_or(part.as_str(), |(_, s)| s).to_string())
        }
        error::KEY_VALUE => SpecError::KeyValue { part, text: whole },
        error::DEVICE => SpecError::Device(part),
        error::VIEW => SpecError::View(part),
        error::UNKNOWN_KEY => SpecError::UnknownKey { key: part, text: whole },
        error::SOFT_NOT_BELOW_HARD => SpecError::SoftNotBelowHard { target, soft: out.soft, hard: out.hard },
        error::FALLBACK_IS_DENY => SpecError::FallbackIsDeny(target),
        error::FALLBACK_WITHOUT_DENY => SpecError::FallbackWithoutDeny(target),
        error::TOO_LONG => SpecError::TooLong(target),
        error::DENY_UNSUPPORTED => SpecError::DenyUnsupported(target),
        error::VIEW_UNSUPPORTED => SpecError::ViewUnsupported(target),
        _ => SpecError::Unread { code: e.code, text: whole },
    }
}
