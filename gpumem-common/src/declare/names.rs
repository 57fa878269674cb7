//! Which variable an environment string `NAME=value` is, and which of
//! them the agent honours (`--env-limits`).
use super::CAP;

/// The variables, as records and `--env-limits` name them.
pub mod source {
    /// `GPUMEM_LIMIT`: a `--limit` rule's right-hand side.
    pub const GPUMEM: u32 = 1;
    /// HAMi's `CUDA_DEVICE_MEMORY_LIMIT`: each device.
    pub const HAMI: u32 = 2;
    /// HAMi's `CUDA_DEVICE_MEMORY_LIMIT_<i>`: device i.
    pub const HAMI_DEVICE: u32 = 3;
    /// NVIDIA's `NVIDIA_GPU_MEMORY_LIMIT`: each device, in MiB.
    pub const NVIDIA: u32 = 4;
    /// KAI's `GPU_MEMORY_LIMIT`: each device, in MiB.
    pub const KAI: u32 = 5;

    /// The bit of a source in masks of sources.
    pub const fn bit(source: u32) -> u32 {
        1 << (source & 31)
    }

    /// The variable's name (`_<i>` for HAMi's per-device ones).
    pub const fn name(source: u32) -> &'static str {
        match source {
            GPUMEM => "GPUMEM_LIMIT",
            HAMI => "CUDA_DEVICE_MEMORY_LIMIT",
            HAMI_DEVICE => "CUDA_DEVICE_MEMORY_LIMIT_<i>",
            NVIDIA => "NVIDIA_GPU_MEMORY_LIMIT",
            KAI => "GPU_MEMORY_LIMIT",
            _ => "?",
        }
    }
}

/// A variable's name as records give it: HAMi's per-device one with its
/// device (`CUDA_DEVICE_MEMORY_LIMIT_1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VarName {
    pub source: u32,
    pub device: usize,
}

impl core::fmt::Display for VarName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.source {
            source::HAMI_DEVICE => write!(f, "CUDA_DEVICE_MEMORY_LIMIT_{}", self.device),
            s => f.write_str(source::name(s)),
        }
    }
}

/// Which variables the agent honours: bits of [`source`] (HAMi's two
/// together).
pub mod honour {
    use super::source::{bit, GPUMEM, HAMI, HAMI_DEVICE, KAI, NVIDIA};
    pub const GPUMEM_LIMIT: u32 = bit(GPUMEM);
    pub const CUDA_DEVICE_MEMORY_LIMIT: u32 = bit(HAMI) | bit(HAMI_DEVICE);
    pub const NVIDIA_GPU_MEMORY_LIMIT: u32 = bit(NVIDIA);
    pub const GPU_MEMORY_LIMIT: u32 = bit(KAI);
    pub const ALL: u32 = GPUMEM_LIMIT | CUDA_DEVICE_MEMORY_LIMIT | NVIDIA_GPU_MEMORY_LIMIT | GPU_MEMORY_LIMIT;
}

/// Devices HAMi-core reads a variable of (`CUDA_DEVICE_MAX_COUNT`), and
/// the most a declaration can name one by one.
pub const DEVICES: usize = 16;

/// The first eight bytes of each variable's name, packed: the kernel
/// reads eight bytes of each environment string and looks further only at
/// these.
pub const PREFIXES: [u64; 4] = [
    super::chars::packed("GPUMEM_L"),
    super::chars::packed("CUDA_DEV"),
    super::chars::packed("NVIDIA_G"),
    super::chars::packed("GPU_MEMO"),
];

/// One variable found: which, its device (HAMi's `_<i>`), and where its
/// value starts in the string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Var {
    pub source: u32,
    pub device: u32,
    pub value_start: u32,
}

const GPUMEM: &[u8] = b"GPUMEM_LIMIT=";
const HAMI: &[u8] = b"CUDA_DEVICE_MEMORY_LIMIT";
const NVIDIA: &[u8] = b"NVIDIA_GPU_MEMORY_LIMIT=";
const KAI: &[u8] = b"GPU_MEMORY_LIMIT=";

/// The first `len` bytes of `buf` begin with `name`.
#[inline(always)]
fn has(buf: &[u8; CAP], len: usize, name: &[u8]) -> bool {
    if len < name.len() {
        return false;
    }
    let mut i = 0;
    while i < name.len() && i < CAP {
        if buf[i] != name[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The variable an environment string (the first `len` bytes of `buf`,
/// without its NUL) is, if it is one of them. HAMi's devices are `_0` to
/// `_15`, written as HAMi-core writes the names it reads (`%d`).
#[inline(always)]
pub fn identify(buf: &[u8; CAP], len: usize) -> Option<Var> {
    let var =
        |source, device, value_start: usize| Some(Var { source, device, value_start: value_start as u32 });
    if has(buf, len, GPUMEM) {
        return var(source::GPUMEM, 0, GPUMEM.len());
    }
    if has(buf, len, NVIDIA) {
        return var(source::NVIDIA, 0, NVIDIA.len());
    }
    if has(buf, len, KAI) {
        return var(source::KAI, 0, KAI.len());
    }
    if !has(buf, len, HAMI) {
        return None;
    }
    let at = |i: usize| (HAMI.len() + i < len).then(|| buf[(HAMI.len() + i) % CAP]);
    match (at(0), at(1), at(2), at(3)) {
        (Some(b'='), ..) => var(source::HAMI, 0, HAMI.len() + 1),
        (Some(b'_'), Some(d @ b'0'..=b'9'), Some(b'='), _) => {
            var(source::HAMI_DEVICE, (d - b'0') as u32, HAMI.len() + 3)
        }
        (Some(b'_'), Some(b'1'), Some(d @ b'0'..=b'5'), Some(b'=')) => {
            var(source::HAMI_DEVICE, 10 + (d - b'0') as u32, HAMI.len() + 4)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{identify, source, Var, PREFIXES};
    use crate::declare::CAP;

    fn identify_str(s: &str) -> Option<Var> {
        let mut buf = [0u8; CAP];
        buf[..s.len()].copy_from_slice(s.as_bytes());
        identify(&buf, s.len())
    }

    #[test]
    fn names() {
        let id = |s: &str| identify_str(s).map(|v| (v.source, v.device, v.value_start));
        assert_eq!(id("GPUMEM_LIMIT=8GiB"), Some((source::GPUMEM, 0, 13)));
        assert_eq!(id("CUDA_DEVICE_MEMORY_LIMIT=64m"), Some((source::HAMI, 0, 25)));
        assert_eq!(id("CUDA_DEVICE_MEMORY_LIMIT_1=32m"), Some((source::HAMI_DEVICE, 1, 27)));
        assert_eq!(id("CUDA_DEVICE_MEMORY_LIMIT_15="), Some((source::HAMI_DEVICE, 15, 28)));
        assert_eq!(id("NVIDIA_GPU_MEMORY_LIMIT=1024"), Some((source::NVIDIA, 0, 24)));
        assert_eq!(id("GPU_MEMORY_LIMIT=2000"), Some((source::KAI, 0, 17)));
        for other in [
            "GPUMEM_LIMITS=1",
            "CUDA_DEVICE_MEMORY_LIMIT_16=1",
            "CUDA_DEVICE_MEMORY_LIMIT_01=1",
            "CUDA_DEVICE_MEMORY_LIMIT_",
            "CUDA_DEVICE_MEMORY_SHARED_CACHE=/x",
            "NVIDIA_GPU_MEMORY_REQUEST=5",
            "GPUMEM",
            "",
        ] {
            assert_eq!(identify_str(other), None::<Var>, "{other}");
        }
    }

    #[test]
    fn every_name_starts_with_a_prefix() {
        for name in
            ["GPUMEM_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT", "NVIDIA_GPU_MEMORY_LIMIT", "GPU_MEMORY_LIMIT"]
        {
            let head = crate::declare::chars::packed(&name[..8]);
            assert!(PREFIXES.contains(&head), "{name}");
        }
    }
}
