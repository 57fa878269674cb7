//! One memory pool's figures and settable attributes, as
//! `cuMemPoolGetAttribute` / `cuMemPoolSetAttribute` read and write them
//! (pool_attributes.rs): reuse policies and the release threshold as the
//! caller set them, what the pool holds now and at most. A freed
//! allocation goes back to the card at once, so what a pool has reserved
//! is what it holds: the card's count stays each process's live
//! allocations, the ground truth the tests compare with.

/// `CUmemPool_attribute` numbers.
pub const REUSE_FOLLOW_EVENT_DEPENDENCIES: u32 = 1;
pub const REUSE_ALLOW_INTERNAL_DEPENDENCIES: u32 = 3;
pub const RELEASE_THRESHOLD: u32 = 4;
pub const RESERVED_MEM_CURRENT: u32 = 5;
pub const RESERVED_MEM_HIGH: u32 = 6;
pub const USED_MEM_CURRENT: u32 = 7;
pub const USED_MEM_HIGH: u32 = 8;
pub const ALLOCATION_TYPE: u32 = 9;
pub const EXPORT_HANDLE_TYPES: u32 = 10;
pub const LOCATION_ID: u32 = 11;
pub const LOCATION_TYPE: u32 = 12;
pub const MAX_POOL_SIZE: u32 = 13;

/// One pool's settable attributes and figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Attributes 1-3 (the reuse policies, all on by default).
    reuse: [i32; 3],
    threshold: u64,
    used: u64,
    used_high: u64,
    /// The reserved high-water mark (reset separately from `used_high`).
    reserved_high: u64,
    /// Access granted to other devices (`cuMemPoolSetAccess`): device ->
    /// `CUmemAccess_flags`.
    pub access: std::collections::BTreeMap<i32, u32>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            reuse: [1; 3],
            threshold: 0,
            used: 0,
            used_high: 0,
            reserved_high: 0,
            access: Default::default(),
        }
    }
}

impl Stats {
    /// An allocation of `bytes` made (`taken`) or freed.
    pub fn used(&mut self, bytes: u64, taken: bool) {
        if taken {
            self.used += bytes;
            self.used_high = self.used_high.max(self.used);
            self.reserved_high = self.reserved_high.max(self.used);
        } else {
            self.used = self.used.saturating_sub(bytes);
        }
    }

    /// Attribute `attr` as the driver gives it: `(value, false)` for an
    /// int, `(value, true)` for a cuuint64_t.
    /// `what` is the pool's (allocation type, location type, location id).
    pub fn get(&self, attr: u32, what: (u32, u32, i32)) -> Option<(u64, bool)> {
        let (kind, id) = (what.0, (what.1 as u64, what.2));
        Some(match attr {
            REUSE_FOLLOW_EVENT_DEPENDENCIES..=REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
                (self.reuse[attr as usize - 1] as u64, false)
            }
            RELEASE_THRESHOLD => (self.threshold, true),
            RESERVED_MEM_CURRENT | USED_MEM_CURRENT => (self.used, true),
            RESERVED_MEM_HIGH => (self.reserved_high, true),
            USED_MEM_HIGH => (self.used_high, true),
            ALLOCATION_TYPE => (kind as u64, false),
            EXPORT_HANDLE_TYPES => (0, false),
            LOCATION_ID => (id.1 as u64, false),
            LOCATION_TYPE => (id.0, false),
            MAX_POOL_SIZE => (0, true),
            _ => return None,
        })
    }

    /// Sets attribute `attr`; the high-water marks only reset to 0.
    pub fn set(&mut self, attr: u32, value: u64) -> bool {
        match attr {
            REUSE_FOLLOW_EVENT_DEPENDENCIES..=REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
                self.reuse[attr as usize - 1] = value as i32;
            }
            RELEASE_THRESHOLD => self.threshold = value,
            RESERVED_MEM_HIGH if value == 0 => self.reserved_high = self.used,
            USED_MEM_HIGH if value == 0 => self.used_high = self.used,
            _ => return false,
        }
        true
    }
}

/// Whether attribute `attr` is a 64-bit value.
pub fn wide(attr: u32) -> bool {
    matches!(attr, RELEASE_THRESHOLD..=USED_MEM_HIGH | MAX_POOL_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_follow_allocations_and_high_marks_reset_to_now() {
        let mut s = Stats::default();
        s.used(100, true);
        s.used(50, true);
        s.used(100, false);
        let dev = (1, 1, 1);
        assert_eq!(s.get(USED_MEM_CURRENT, dev), Some((50, true)));
        assert_eq!(s.get(USED_MEM_HIGH, dev), Some((150, true)));
        assert!(s.set(USED_MEM_HIGH, 0));
        assert_eq!(s.get(USED_MEM_HIGH, dev), Some((50, true)));
        assert!(!s.set(USED_MEM_HIGH, 7), "high marks only reset");
        assert!(s.set(RELEASE_THRESHOLD, u64::MAX));
        assert_eq!(s.get(RELEASE_THRESHOLD, dev), Some((u64::MAX, true)));
        assert_eq!(s.get(LOCATION_TYPE, (1, 2, 0)), Some((2, false)));
        assert_eq!(s.get(LOCATION_ID, dev), Some((1, false)));
        assert_eq!(s.get(ALLOCATION_TYPE, (2, 0, 0)), Some((2, false)));
        assert_eq!(s.get(99, dev), None);
    }
}
