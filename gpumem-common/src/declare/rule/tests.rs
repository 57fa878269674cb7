use proptest::prelude::*;
use std::{string::String, vec::Vec};

use super::{error, parse, view, RuleText};
use crate::{
    declare::{action, size, word::U32Parser},
    maps::limit_action::{AUDIT, DENY, SIGNAL},
};

/// The rule read the way `--limit` read it before the kernel shared its
/// parser (split at commas, then at the first `=`), with the shared
/// value parsers; only the error's code is compared.
fn reference(text: &str) -> Result<RuleText, u32> {
    let size_code = error::of_size;
    let action_code = |e| match e {
        action::ActionError::Action => error::ACTION,
        action::ActionError::Signal => error::SIGNAL,
        action::ActionError::SignalRange(_) => error::SIGNAL_RANGE,
    };
    let mut parts = text.split(',');
    let hard = size::parse(parts.next().unwrap_or_default().as_bytes()).0.map_err(size_code)?;
    let mut out = RuleText { hard, ..RuleText::default() };
    for part in parts {
        let (key, value) = part.split_once('=').ok_or(error::KEY_VALUE)?;
        let v = value.as_bytes();
        match key.trim() {
            "soft" => out.soft = size::parse(v).0.map_err(size_code)?,
            "action" => (out.action, out.signal) = action::parse(v).map_err(action_code)?,
            "fallback" => (out.fallback, out.fallback_signal) = action::parse(v).map_err(action_code)?,
            "device" => {
                let mut n = U32Parser::default();
                v.iter().for_each(|&c| n.feed(c));
                (out.has_device, out.device) = (1, n.finish().ok_or(error::DEVICE)?);
            }
            "view" => {
                out.view = match value.trim() {
                    "limit" => view::LIMIT,
                    "driver" => view::DRIVER,
                    _ => return Err(error::VIEW),
                }
            }
            _ => return Err(error::UNKNOWN_KEY),
        }
    }
    if out.soft != 0 && out.soft >= out.hard {
        return Err(error::SOFT_NOT_BELOW_HARD);
    }
    if out.fallback == DENY {
        return Err(error::FALLBACK_IS_DENY);
    }
    if out.fallback != 0 && out.action != DENY {
        return Err(error::FALLBACK_WITHOUT_DENY);
    }
    Ok(out)
}

fn rule(s: &str) -> Result<RuleText, u32> {
    parse(s.as_bytes()).map_err(|e| e.code)
}

#[test]
fn full_rules() {
    let r = rule("8GiB,soft=6GiB,action=deny,fallback=signal:SIGTERM,device=1").unwrap();
    assert_eq!((r.hard, r.soft), (8 << 30, 6 << 30));
    assert_eq!((r.action, r.fallback, r.fallback_signal, r.device()), (DENY, SIGNAL, 15, 1));
    assert_eq!(rule("1G").unwrap().device(), crate::maps::DEVICE_ANY);
    assert_eq!(rule("512MiB").unwrap().action, 0);
    assert_eq!(rule("1G,action=audit").unwrap().action, AUDIT);
    assert_eq!(rule("1G,view=driver").unwrap().view, view::DRIVER);
    assert_eq!(rule("1G, view = limit").unwrap().view, view::LIMIT);
    assert_eq!(rule("1G,soft=1M,soft=2M").unwrap().soft, 2 << 20);
}

#[test]
fn refusals_say_what_and_where() {
    for (text, code) in [
        ("", error::SIZE_NO_NUMBER),
        ("0", error::SIZE_ZERO),
        ("1G,soft=2G", error::SOFT_NOT_BELOW_HARD),
        ("1G,action=audit,fallback=signal", error::FALLBACK_WITHOUT_DENY),
        ("1G,action=deny,fallback=deny", error::FALLBACK_IS_DENY),
        ("1G,colour=red", error::UNKNOWN_KEY),
        ("1G,view=guess", error::VIEW),
        ("1G,", error::KEY_VALUE),
        ("1G,soft", error::KEY_VALUE),
        ("1G,device=-1", error::DEVICE),
        ("1G,action=signal:99", error::SIGNAL_RANGE),
        ("1G,action=signal:SIGFOO", error::SIGNAL),
        ("1G,action=kill", error::ACTION),
    ] {
        assert_eq!(rule(text), Err(code), "{text:?}");
    }
    let e = parse(b"8GiB,soft= 8 XB ,colour=red").unwrap_err();
    assert_eq!((e.code, e.start, e.end, e.aux_start, e.aux_end), (error::SIZE_UNIT, 10, 16, 13, 15));
    let e = parse(b"1G, colour =red").unwrap_err();
    assert_eq!((e.code, e.start, e.end), (error::UNKNOWN_KEY, 4, 10));
    let e = parse(b"1G,action=signal:70").unwrap_err();
    assert_eq!((e.code, e.number), (error::SIGNAL_RANGE, 70));
}

/// A field for generated rules: right or wrong in each way the grammar has.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        "(soft|action|fallback|device|view|colour| soft )=",
        "soft=[0-9]{1,3}(|K|MiB|G| xb)",
        "action=(audit|deny|signal|signal:(TERM|9|99|x)| deny |kill)",
        "fallback=(signal:TERM|audit|deny)",
        "device=[ +-]?[0-9]{0,3}",
        "view=(limit|driver| limit |x)",
        "[a-z= ]{0,6}",
    ]
}

proptest! {
    /// Any bytes are a rule or a reason, never a panic.
    #[test]
    fn any_bytes_parse_or_are_refused(text in proptest::collection::vec(any::<u8>(), 0..80)) {
        let _ = parse(&text);
    }

    /// The byte-at-a-time reading agrees with splitting the text.
    #[test]
    fn agrees_with_splitting(hard in "[ ]?[0-9]{0,4}(|G|MiB|x)", fields in proptest::collection::vec(field(), 0..5)) {
        let text = core::iter::once(hard).chain(fields).collect::<Vec<_>>().join(",");
        prop_assert_eq!(rule(&text), reference(&text), "{:?}", text);
    }
}
