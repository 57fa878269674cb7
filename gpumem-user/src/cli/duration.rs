//! Durations given on the command line.
use std::time::Duration;

/// The longest duration any option takes (a century: beyond it the
/// timers' arithmetic would overflow).
const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Why a duration given on the command line is refused.
#[derive(Debug, thiserror::Error)]
pub enum DurationError {
    #[error("`{0}`: give a positive duration (seconds, or e.g. 90s, 5m)")]
    NotPositive(String),
    #[error("`{text}` is not a duration ({source}): give seconds, or e.g. 90s, 5m")]
    Unreadable { text: String, source: humantime::DurationError },
    #[error("`{0}`: give a positive duration of at most a century")]
    OutOfRange(String),
    #[error("`{0}`: give at most 1s (the view refreshes at least once a second)")]
    TooSlow(String),
}

/// A positive duration: a number of seconds (`1.5`) or a humantime
/// duration (`90s`, `5m`, `250ms`).
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let t = s.trim();
    let d = match t.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs < LONGEST.as_secs_f64() => {
            Duration::from_secs_f64(secs)
        }
        Ok(_) => return Err(DurationError::NotPositive(s.into())),
        Err(_) => humantime::parse_duration(t)
            .map_err(|source| DurationError::Unreadable { text: s.into(), source })?,
    };
    if d.is_zero() || d > LONGEST {
        return Err(DurationError::OutOfRange(s.into()));
    }
    Ok(d)
}

/// [`parse_duration`], where 0 means off (zero).
pub fn parse_duration_or_off(s: &str) -> Result<Duration, DurationError> {
    if s.trim().parse::<f64>() == Ok(0.0) {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

/// [`parse_duration`], at most a second: `gpumem top`'s refresh.
pub fn parse_refresh(s: &str) -> Result<Duration, DurationError> {
    let d = parse_duration(s)?;
    if d > Duration::from_secs(1) {
        return Err(DurationError::TooSlow(s.into()));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any text is a positive duration of at most a century, or a
        /// reason; never a panic.
        #[test]
        fn any_duration_text_parses_or_is_refused(text in ".{0,16}") {
            if let Ok(d) = parse_duration(&text) {
                proptest::prop_assert!(!d.is_zero() && d <= LONGEST);
            }
        }
    }
}
