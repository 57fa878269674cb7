//! A probe site and how the kernel runs it, whatever the architecture.
use serde::{Deserialize, Serialize};

/// How far into a function a probe may move, in bytes.
pub const WINDOW: usize = 32;

/// Where a probe sits in its function, and what the kernel does with the
/// instruction there when it hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// Bytes from the function's first.
    pub offset: u32,
    pub how: How,
}

/// What the kernel does at a probe site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// The function's first instruction is one the kernel emulates.
    Emulated,
    /// Moved past instructions that change nothing the programs read, to
    /// one the kernel emulates.
    Shifted,
    /// No emulated instruction within reach: at offset 0, single-stepped
    /// out of line (a second trap on every call).
    SingleStepped,
}

impl Site {
    /// Offset 0, single-stepped: where no better site is known.
    pub const START: Site = Site { offset: 0, how: How::SingleStepped };
}

/// Counts of sites by how the kernel runs them, for a library.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub emulated: usize,
    pub shifted: usize,
    pub single_stepped: usize,
    /// The largest shift, in bytes.
    pub max_shift: u32,
}

impl Summary {
    pub fn of<'a>(sites: impl IntoIterator<Item = &'a Site>) -> Self {
        sites.into_iter().fold(Self::default(), |mut s, site| {
            match site.how {
                How::Emulated => s.emulated += 1,
                How::Shifted => s.shifted += 1,
                How::SingleStepped => s.single_stepped += 1,
            }
            s.max_shift = s.max_shift.max(site.offset);
            s
        })
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} emulated at entry, {} shifted", self.emulated, self.shifted)?;
        if self.shifted > 0 {
            write!(f, " (by up to {} bytes)", self.max_shift)?;
        }
        write!(f, ", {} single-stepped", self.single_stepped)
    }
}
