use proptest::prelude::*;
use std::format;

use super::{parse, SizeError};

fn size(s: &str) -> Result<u64, SizeError> {
    parse(s.as_bytes()).0
}

/// The agent's parser before the kernel shared it, for texts both read
/// alike (ASCII, at most nine decimals), with its floating point replaced
/// by exact 128-bit arithmetic (f64 rounded 1100.4 TiB a byte high).
fn reference(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return None;
    }
    let digits = |s: &str| if s.is_empty() { Some(0u128) } else { s.parse::<u128>().ok() };
    let scale = 10u128.pow(frac.len() as u32);
    let exact = (digits(int)? * scale + digits(frac)?) * mult;
    let bytes = (2 * exact + scale) / (2 * scale);
    (bytes > 0).then_some(u64::try_from(bytes).ok()?)
}

#[test]
fn units() {
    assert_eq!(size("4096"), Ok(4096));
    assert_eq!(size("512MiB"), Ok(512 << 20));
    assert_eq!(size("8GiB"), Ok(8 << 30));
    assert_eq!(size("8G"), Ok(8 << 30));
    assert_eq!(size("8g"), Ok(8 << 30));
    assert_eq!(size("1.5GiB"), Ok(3 << 29));
    assert_eq!(size("2GB"), Ok(2_000_000_000));
    assert_eq!(size(" 10 mib "), Ok(10 << 20));
    assert_eq!(size("1T"), Ok(1 << 40));
    assert_eq!(size("3b"), Ok(3));
    assert_eq!(size(".5K"), Ok(512));
    assert_eq!(size("1."), Ok(1));
    assert_eq!(size("0.1MiB"), Ok(104_858));
    assert_eq!(size("1.000000001GB"), Ok(1_000_000_001));
    assert_eq!(size("0.5"), Ok(1));
    assert_eq!(size("18446744073709551615"), Ok(u64::MAX));
}

#[test]
fn refusals_in_order() {
    assert_eq!(size(""), Err(SizeError::NoNumber));
    assert_eq!(size("  "), Err(SizeError::NoNumber));
    assert_eq!(size("GiB"), Err(SizeError::NoNumber));
    assert_eq!(size("-1G"), Err(SizeError::NoNumber));
    assert_eq!(size("8XB"), Err(SizeError::Unit));
    assert_eq!(size("8 G B"), Err(SizeError::Unit));
    assert_eq!(size("8GiBs"), Err(SizeError::Unit));
    assert_eq!(size("1e5"), Err(SizeError::Unit));
    // The unit is checked before the number, as it always was.
    assert_eq!(size("1.2.3XB"), Err(SizeError::Unit));
    assert_eq!(size("1.2.3G"), Err(SizeError::NotANumber));
    assert_eq!(size(".G"), Err(SizeError::NotANumber));
    assert_eq!(size("1.0000000001G"), Err(SizeError::Decimals));
    assert_eq!(size("99999999999TiB"), Err(SizeError::TooLarge));
    assert_eq!(size("18446744073709551616"), Err(SizeError::TooLarge));
    assert_eq!(size("16777216T"), Err(SizeError::TooLarge));
    assert_eq!(size("0"), Err(SizeError::Zero));
    assert_eq!(size("0.0000000001"), Err(SizeError::Decimals));
    assert_eq!(size("0.4"), Err(SizeError::Zero));
}

#[test]
fn the_unit_span_is_kept_for_the_message() {
    let (r, p) = parse(b" 8 XiB ");
    assert_eq!(r, Err(SizeError::Unit));
    assert_eq!((p.unit_start, p.unit_end), (3, 6));
}

proptest! {
    /// Any bytes are a size or a reason, never a panic, and a size is never 0.
    #[test]
    fn any_bytes_parse_or_are_refused(text in proptest::collection::vec(any::<u8>(), 0..40)) {
        if let Ok(bytes) = parse(&text).0 {
            prop_assert!(bytes > 0);
        }
    }

    /// Sizes read as the floating-point parser read them, where that was exact.
    #[test]
    fn agrees_with_the_earlier_parser(
        int in "[0-9]{0,6}",
        frac in proptest::option::of("[0-9]{0,5}"),
        unit in "(|b|k|m|g|t|kib|mib|gib|tib|kb|mb|gb|tb|KiB|GB|xb)",
        pad in "[ \t]{0,2}",
    ) {
        let text = match &frac {
            Some(f) => format!("{pad}{int}.{f}{pad}{unit}{pad}"),
            None => format!("{pad}{int}{unit}{pad}"),
        };
        prop_assert_eq!(size(&text).ok(), reference(&text), "{:?}", text);
    }

    /// A whole number of a binary unit is that many powers of 1024.
    #[test]
    fn whole_binary_units_are_exact(n in 1u64..1_000_000, shift in 0usize..4) {
        let unit = ["KiB", "MiB", "GiB", "TiB"][shift];
        prop_assert_eq!(size(&format!("{n}{unit}")), Ok(n << (10 * (shift + 1))));
    }
}
