//! Which build pinned what: a build's identity (its pin directory's name)
//! and the tag its programs know it by.

/// FNV-1a over `bytes`: how builds and layouts are told apart.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes
        .into_iter()
        .fold(0xcbf2_9ce4_8422_2325, |hash, b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The build's identity: FNV-1a over the object's bytes, whether deny
/// rewrites registers, whether the programs are loaded for multi links,
/// whether they keep calls in flight in task storage (where calls are
/// looked for), and the ring buffer's size.
pub fn identity(
    object: &[u8],
    deny_by_registers: bool,
    ring_bytes: u32,
    multi_links: bool,
    task_calls: bool,
) -> String {
    let flags = [u8::from(deny_by_registers)]
        .into_iter()
        .chain(multi_links.then_some(2))
        .chain((!task_calls).then_some(4));
    let tail = flags.chain(ring_bytes.to_le_bytes());
    format!("{:016x}", fnv1a(object.iter().copied().chain(tail)))
}

/// The tag (`gpumem_common::handover::tag`) the programs of the build
/// with this [`identity`] (its pin directory's name) know it by.
pub fn tag(identity: &str) -> u32 {
    gpumem_common::handover::tag(u64::from_str_radix(identity, 16).unwrap_or(0))
}
