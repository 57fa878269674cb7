//! `NVIDIA_GPU_MEMORY_LIMIT` read as NVIDIA's container toolkit reads it
//! (`parseMebiBytes` in cmd/nvidia-cdi-hook/apply-cuda-memory-limits):
//!
//! ```go
//! mebiBytes, err := strconv.ParseUint(value, 10, 64)
//! if mebiBytes > maxMebiBytes { return 0, fmt.Errorf(...) }
//! ```
//!
//! Decimal digits only (no sign, unit or white space), in MiB, at most
//! `nvml.DEVICE_MEMORY_LIMIT_MAX` / 1 MiB; 0 is a limit of 0 bytes. KAI's
//! `GPU_MEMORY_LIMIT` is written by its binder as `fmt.Sprintf("%d", MiB)`
//! (no upstream code reads it) and is read the same way.
use super::chars::{is_digit, push_digit};

/// `maxMebiBytes` in NVIDIA's hook.
pub const MAX_MIB: u64 = 17_592_186_044_415;

/// Why a text is not a number of MiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MibError {
    /// Empty, or something other than a decimal digit.
    NotANumber,
    /// Above [`MAX_MIB`].
    TooLarge,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MibParser {
    bad: u32,
    digits: u32,
    value: u64,
}

impl MibParser {
    #[inline(always)]
    pub fn feed(&mut self, c: u8) {
        if !is_digit(c) {
            self.bad = 1;
            return;
        }
        self.digits += 1;
        // Past the most allowed either way.
        self.value = push_digit(self.value, c - b'0').unwrap_or(u64::MAX).min(MAX_MIB + 1);
    }

    /// The limit in bytes.
    #[inline(always)]
    pub fn finish(&self) -> Result<u64, MibError> {
        if self.bad != 0 || self.digits == 0 {
            Err(MibError::NotANumber)
        } else if self.value > MAX_MIB {
            Err(MibError::TooLarge)
        } else {
            Ok(self.value << 20)
        }
    }
}

/// Reads a whole text as NVIDIA's hook does.
pub fn parse(text: &[u8]) -> Result<u64, MibError> {
    let mut p = MibParser::default();
    text.iter().for_each(|&c| p.feed(c));
    p.finish()
}

#[cfg(test)]
mod tests {
    use super::{parse, MibError, MAX_MIB};

    /// The cases of NVIDIA's own test file.
    #[test]
    fn reads_as_nvidia_s_hook_does() {
        assert_eq!(parse(b"1024"), Ok(1 << 30));
        assert_eq!(parse(b"0"), Ok(0));
        assert_eq!(parse(b"17592186044415"), Ok(MAX_MIB << 20));
        assert_eq!(parse(b"17592186044416"), Err(MibError::TooLarge));
        assert_eq!(parse(b"99999999999999999999999"), Err(MibError::TooLarge));
        for bad in ["", "-1", " 1024", "12abc", "+5", "1G"] {
            assert_eq!(parse(bad.as_bytes()), Err(MibError::NotANumber), "{bad:?}");
        }
    }
}
