//! The uprobe attach cookie: what one program serving many entry points
//! learns of the one it runs for. Bits 0..32: the API id; 32..40: the
//! memory kind; 40..64: the distance from the probed function's first byte
//! to a `ret` instruction, which `deny` returns through (0: none).

/// The largest distance from a function to a `ret` a cookie carries.
pub const MAX_RET_DELTA: u32 = (1 << 24) - 1;

/// Packs an API id, a memory kind and the distance to a `ret` (a 0xC3
/// byte after the function's start; 0, or more than [`MAX_RET_DELTA`],
/// for none).
pub const fn pack(api: u32, kind: u32, ret_delta: u32) -> u64 {
    let delta = if ret_delta > MAX_RET_DELTA { 0 } else { ret_delta };
    (api as u64) | (((kind & 0xff) as u64) << 32) | ((delta as u64) << 40)
}

/// The API id in a cookie.
pub const fn api(cookie: u64) -> u32 {
    cookie as u32
}

/// The memory kind in a cookie.
pub const fn kind(cookie: u64) -> u32 {
    ((cookie >> 32) & 0xff) as u32
}

/// The distance to a `ret` in a cookie, or 0.
pub const fn ret_delta(cookie: u64) -> u32 {
    (cookie >> 40) as u32
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cookie_carries_api_kind_and_the_distance_to_a_ret() {
        let c = super::pack(7, 3, 0x1234);
        assert_eq!((super::api(c), super::kind(c), super::ret_delta(c)), (7, 3, 0x1234));
        let too_far = super::pack(7, 3, super::MAX_RET_DELTA + 1);
        assert_eq!(super::ret_delta(too_far), 0, "too far to carry: none");
    }
}
