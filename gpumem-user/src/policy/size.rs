//! Human sizes: `512MiB`, `8GiB`, `1.5G`, `4096`.

/// Parses a byte size. Binary units (`KiB`, `MiB`, `GiB`, `TiB`, and the
/// bare `K`, `M`, `G`, `T` as memory.max reads them) are powers of 1024;
/// decimal units (`KB`, `MB`, `GB`, `TB`) powers of 1000. Zero is refused:
/// a zero limit is a mistake, not a policy.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("`{text}` is not a size: it must start with a number (for example 8GiB)"));
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "`{text}`: unknown unit `{other}` (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)"
            ))
        }
    };
    let bytes = if num.contains('.') {
        let v: f64 = num.parse().map_err(|_| format!("`{text}` is not a size"))?;
        let b = v * mult as f64;
        if !(b.is_finite() && b < u64::MAX as f64) {
            return Err(format!("`{text}` is too large"));
        }
        b.round() as u64
    } else {
        let v: u64 = num.parse().map_err(|_| format!("`{text}` is not a size"))?;
        v.checked_mul(mult).ok_or_else(|| format!("`{text}` is too large"))?
    };
    if bytes == 0 {
        return Err(format!(
            "`{text}`: a limit of zero bytes would refuse every allocation; give a positive size"
        ));
    }
    Ok(bytes)
}

/// Parses a ring buffer size for `--ring-buffer`: the kernel wants a power
/// of two and a multiple of the page size.
pub fn parse_ring_size(text: &str) -> Result<u32, String> {
    const MIN: u64 = 64 << 10;
    const MAX: u64 = 1 << 30;
    let bytes = parse_size(text)?;
    if !bytes.is_power_of_two() || !(MIN..=MAX).contains(&bytes) {
        return Err(format!(
            "`{text}`: the ring buffer must be a power of two from 64KiB to 1GiB (for example 4MiB)"
        ));
    }
    Ok(bytes as u32)
}

#[cfg(test)]
mod tests {
    use super::{parse_ring_size, parse_size};

    #[test]
    fn ring_sizes_are_powers_of_two_in_range() {
        assert_eq!(parse_ring_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_ring_size("65536"), Ok(64 << 10));
        for bad in ["3MiB", "32KiB", "2GiB", "0", "x"] {
            assert!(parse_ring_size(bad).is_err(), "{bad}");
        }
        assert!(parse_ring_size("3MiB").unwrap_err().contains("power of two"));
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
        assert!(parse_size("0").unwrap_err().contains("zero"));
        assert!(parse_size("GiB").unwrap_err().contains("start with a number"));
        assert!(parse_size("8XB").unwrap_err().contains("unknown unit"));
        assert!(parse_size("99999999999TiB").unwrap_err().contains("too large"));
    }
}
