//! Which limits declared in a workload's environment the agent honours
//! (`--env-limits`, the file's `env_limits`), and the most one may set
//! (`--env-limits-max`, `env_limits_max`).
use gpumem_common::declare::names::honour;

use super::{error::SpecError, size::parse_size};

/// The variables, as `--env-limits` names them, with their bits.
pub const NAMES: [(&str, u32); 4] = [
    ("GPUMEM_LIMIT", honour::GPUMEM_LIMIT),
    ("CUDA_DEVICE_MEMORY_LIMIT", honour::CUDA_DEVICE_MEMORY_LIMIT),
    ("NVIDIA_GPU_MEMORY_LIMIT", honour::NVIDIA_GPU_MEMORY_LIMIT),
    ("GPU_MEMORY_LIMIT", honour::GPU_MEMORY_LIMIT),
];

/// What the agent does with declared limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvPolicy {
    /// Bits of `names::honour`; 0: none.
    pub honour: u32,
    /// A declared value above it is clamped to it.
    pub max: Option<u64>,
}

impl Default for EnvPolicy {
    fn default() -> Self {
        Self { honour: honour::ALL, max: None }
    }
}

/// `all`, `none`, or names from [`NAMES`] separated by commas.
pub fn parse_env_limits(text: &str) -> Result<u32, SpecError> {
    match text.trim() {
        "all" => return Ok(honour::ALL),
        "none" => return Ok(0),
        _ => {}
    }
    text.split(',').try_fold(0, |bits, name| {
        let name = name.trim();
        NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, bit)| bits | bit)
            .ok_or_else(|| SpecError::EnvName(name.to_string()))
    })
}

/// `--env-limits-max`: a size.
pub fn parse_env_max(text: &str) -> Result<u64, SpecError> {
    parse_size(text)
}

/// The names a set of bits honours, for messages.
pub fn names(bits: u32) -> String {
    match bits {
        0 => "none".into(),
        b if b == honour::ALL => "all".into(),
        b => NAMES.iter().filter(|(_, bit)| b & bit != 0).map(|(n, _)| *n).collect::<Vec<_>>().join(","),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_all_and_none() {
        assert_eq!(parse_env_limits("all"), Ok(honour::ALL));
        assert_eq!(parse_env_limits(" none "), Ok(0));
        assert_eq!(parse_env_limits("GPUMEM_LIMIT"), Ok(honour::GPUMEM_LIMIT));
        let two = parse_env_limits("GPUMEM_LIMIT, CUDA_DEVICE_MEMORY_LIMIT").unwrap();
        assert_eq!(two, honour::GPUMEM_LIMIT | honour::CUDA_DEVICE_MEMORY_LIMIT);
        assert_eq!(names(two), "GPUMEM_LIMIT,CUDA_DEVICE_MEMORY_LIMIT");
        let e = parse_env_limits("GPUMEM_LIMIT,FOO").unwrap_err().to_string();
        assert!(e.contains("`FOO`") && e.contains("GPU_MEMORY_LIMIT"), "{e}");
        assert!(parse_env_limits("").is_err());
    }
}
