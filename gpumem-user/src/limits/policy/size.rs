//! Human sizes: `512MiB`, `8GiB`, `1.5G`, `4096`, read by the parser the
//! kernel reads `GPUMEM_LIMIT` with (`gpumem_common::declare::size`): a
//! bare `G` means GiB, as memory.max reads it.
use gpumem_common::declare::size::{self, SizeError, SizeParser};

use super::error::SpecError;

/// Parses a byte size. Binary units (`KiB`, `MiB`, `GiB`, `TiB`, and the
/// bare `K`, `M`, `G`, `T` as memory.max reads them) are powers of 1024;
/// decimal units (`KB`, `MB`, `GB`, `TB`) powers of 1000; at most nine
/// decimals. Zero is refused: a zero limit is a mistake, not a policy.
pub fn parse_size(text: &str) -> Result<u64, SpecError> {
    let (read, parser) = size::parse(text.as_bytes());
    read.map_err(|e| size_error(text, e, &parser))
}

/// Why `text` is not a size, as the user is told.
pub fn size_error(text: &str, e: SizeError, parser: &SizeParser) -> SpecError {
    let text = text.to_string();
    match e {
        SizeError::NoNumber => SpecError::SizeWithoutNumber(text),
        SizeError::Unit => {
            let unit = text.get(parser.unit_start as usize..parser.unit_end as usize).unwrap_or_default();
            SpecError::SizeUnit { unit: unit.to_ascii_lowercase(), text }
        }
        SizeError::NotANumber => SpecError::Size(text),
        SizeError::Decimals => SpecError::SizeDecimals(text),
        SizeError::TooLarge => SpecError::SizeTooLarge(text),
        SizeError::Zero => SpecError::SizeZero(text),
    }
}

/// Parses a ring buffer size for `--ring-buffer`: the kernel wants a power
/// of two and a multiple of the page size.
pub fn parse_ring_size(text: &str) -> Result<u32, SpecError> {
    const MIN: u64 = 64 << 10;
    const MAX: u64 = 1 << 30;
    let bytes = parse_size(text)?;
    if !bytes.is_power_of_two() || !(MIN..=MAX).contains(&bytes) {
        return Err(SpecError::RingSize(text.into()));
    }
    Ok(bytes as u32)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{parse_ring_size, parse_size};

    proptest! {
        /// Any text is a size or a reason, never a panic; a size is never 0.
        #[test]
        fn any_text_parses_or_is_refused(text in ".{0,24}") {
            if let Ok(bytes) = parse_size(&text) {
                prop_assert!(bytes > 0);
            }
        }

        /// A whole number of a binary unit is that many powers of 1024.
        #[test]
        fn whole_binary_units_are_exact(n in 1u64..1_000_000, shift in 0usize..4) {
            let unit = ["KiB", "MiB", "GiB", "TiB"][shift];
            prop_assert_eq!(parse_size(&format!("{n}{unit}")), Ok(n << (10 * (shift + 1))));
        }
    }

    #[test]
    fn ring_sizes_are_powers_of_two_in_range() {
        assert_eq!(parse_ring_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_ring_size("65536"), Ok(64 << 10));
        for bad in ["3MiB", "32KiB", "2GiB", "0", "x"] {
            assert!(parse_ring_size(bad).is_err(), "{bad}");
        }
        assert!(parse_ring_size("3MiB").unwrap_err().to_string().contains("power of two"));
    }

    #[test]
    fn units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("8G"), Ok(8 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size(" 10 mib "), Ok(10 << 20));
    }

    #[test]
    fn refusals_say_why() {
        let err = |s: &str| parse_size(s).unwrap_err().to_string();
        assert!(err("0").contains("zero"));
        assert!(err("GiB").contains("start with a number"));
        assert!(err("8XB").contains("unknown unit"));
        assert!(err("99999999999TiB").contains("too large"));
        assert!(err("1.0000000001G").contains("at most 9 decimals"));
    }
}
