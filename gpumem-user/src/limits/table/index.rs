//! Where the kernel looks a target's rules up: `LIMIT_INDEX` (a process's
//! or a cgroup's) and `COMM_LIMITS` (a comm's), each key holding its
//! target's rules (`TargetRules`): their first slots, and for each device
//! the slots that count its calls, packed as `limit_list` packs them. At
//! most `LIMITS_PER_CALL` rules a target (one over all devices, one per
//! device, one for each device on its own...).
//!
//! The kernel keeps each cgroup's walk of its ancestors' rules
//! (`CGROUP_LIMITS`) while `LIMIT_INDEX_GENERATION` stays as it was: every
//! change here bumps it after the map's write, so a walk kept from before
//! is walked again.
use std::collections::HashMap;

use aya::maps::{Array, HashMap as BpfHashMap, MapData, MapError};
use gpumem_common::{
    limit_list, limit_scope, LimitKey, TargetRules, INDEX_DEVICES, LIMITS_PER_CALL, TASK_COMM_LEN,
};

use super::installed::{Devices, Installed};

/// A target's key in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexKey {
    Target(LimitKey),
    Comm([u8; TASK_COMM_LEN]),
}

/// A rule as the index keeps it: its first slot, and which devices'
/// calls count in which of its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub slot: u32,
    pub devices: Devices,
    /// A rule per device: how many devices' slots follow the first.
    pub span: u32,
}

impl Head {
    pub fn of(rule: &Installed) -> Self {
        Self { slot: rule.slot, devices: rule.devices(), span: rule.span() }
    }

    /// The slot where the calls that read the index's entry `e` count,
    /// if any do: a rule over all devices, its own; a rule for one
    /// device, its own where that device reads (the kernel checks the
    /// device); a rule per device, that device's.
    fn on(&self, e: usize) -> Option<u32> {
        match self.devices {
            Devices::All => Some(self.slot),
            Devices::One(d) => (d as usize % INDEX_DEVICES == e).then_some(self.slot),
            Devices::Each => (e < self.span as usize).then(|| self.slot + 1 + e as u32),
        }
    }
}

/// What the kernel reads for a target with these rules.
pub fn target_rules(heads: &[Head]) -> TargetRules {
    let firsts: Vec<u32> = heads.iter().map(|h| h.slot).collect();
    TargetRules {
        heads: limit_list::rules(&firsts),
        on: std::array::from_fn(|e| {
            limit_list::rules(&heads.iter().filter_map(|h| h.on(e)).collect::<Vec<_>>())
        }),
    }
}

pub struct Index {
    index: BpfHashMap<MapData, LimitKey, TargetRules>,
    comms: BpfHashMap<MapData, [u8; TASK_COMM_LEN], TargetRules>,
    /// Bumped after each change of `index` (see the module's text).
    generation: Array<MapData, u64>,
    /// Each key's rules, as written.
    heads: HashMap<IndexKey, Vec<Head>>,
}

/// Why a rule could not be indexed.
#[derive(Debug)]
pub enum IndexError {
    /// The target has [`LIMITS_PER_CALL`] rules already.
    Full,
    Map(MapError),
}

impl Index {
    pub fn new(
        index: BpfHashMap<MapData, LimitKey, TargetRules>,
        comms: BpfHashMap<MapData, [u8; TASK_COMM_LEN], TargetRules>,
        generation: Array<MapData, u64>,
    ) -> Self {
        Self { index, comms, generation, heads: HashMap::new() }
    }

    /// Indexes `head`'s rule under `key`, beside the target's others.
    pub fn add(&mut self, key: IndexKey, head: Head) -> Result<(), IndexError> {
        let heads = self.heads.entry(key).or_default();
        if heads.len() >= LIMITS_PER_CALL {
            return Err(IndexError::Full);
        }
        heads.push(head);
        let heads = heads.clone();
        self.write(key, &heads).map_err(IndexError::Map)
    }

    /// Takes the rules headed at `slots` out of `key`'s (its others stay,
    /// in their order); those taken.
    pub fn take(&mut self, key: IndexKey, slots: &[u32]) -> Result<Vec<Head>, MapError> {
        let heads = self.heads.get(&key).cloned().unwrap_or_default();
        let (taken, kept): (Vec<Head>, Vec<Head>) = heads.into_iter().partition(|h| slots.contains(&h.slot));
        if kept.is_empty() {
            self.remove(key)?;
        } else if !taken.is_empty() {
            self.write(key, &kept)?;
            self.heads.insert(key, kept);
        }
        Ok(taken)
    }

    fn write(&mut self, key: IndexKey, heads: &[Head]) -> Result<(), MapError> {
        let rules = target_rules(heads);
        match key {
            IndexKey::Target(k) => {
                self.index.insert(k, rules, 0)?;
                self.bump_for(k)
            }
            IndexKey::Comm(c) => self.comms.insert(c, rules, 0),
        }
    }

    /// Tells the kernel the walks it kept are stale (from the map's own
    /// count, which an earlier agent's walks were kept under): after every
    /// change of a cgroup's rules, and once when the agent opens the index,
    /// for a change an earlier agent made and died before it bumped
    /// (`--persist`).
    pub fn bump(&mut self) -> Result<(), MapError> {
        let now = self.generation.get(&0, 0)?;
        self.generation.set(0, now.wrapping_add(1), 0)
    }

    /// [`Self::bump`] after a change of `key`'s rules where the kernel
    /// keeps walks of them: a cgroup's (a process's are looked up at every
    /// call).
    fn bump_for(&mut self, key: LimitKey) -> Result<(), MapError> {
        if key.scope != limit_scope::CGROUP {
            return Ok(());
        }
        self.bump()
    }

    /// Takes every rule of `key` out of the index; their heads (none
    /// where it has none: the kernel's map is not asked).
    pub fn remove(&mut self, key: IndexKey) -> Result<Vec<Head>, MapError> {
        let Some(heads) = self.heads.remove(&key) else { return Ok(Vec::new()) };
        match key {
            IndexKey::Target(k) => {
                self.index.remove(&k)?;
                self.bump_for(k)?;
            }
            IndexKey::Comm(c) => self.comms.remove(&c)?,
        }
        Ok(heads)
    }

    /// What the kernel's index holds (an earlier agent's, `--persist`):
    /// each key with its rules' first slots, which this index takes as
    /// its own, each as `head` (read from its rule) says.
    pub fn read_back(&mut self, head: impl Fn(u32) -> Option<Head>) -> Vec<(IndexKey, Vec<u32>)> {
        let mut out: Vec<(IndexKey, Vec<u32>)> = Vec::new();
        for (k, rules) in self.index.iter().flatten() {
            out.push((IndexKey::Target(k), limit_list::slots_of(rules.heads).collect()));
        }
        for (c, rules) in self.comms.iter().flatten() {
            out.push((IndexKey::Comm(c), limit_list::slots_of(rules.heads).collect()));
        }
        for (key, firsts) in &out {
            self.heads.insert(*key, firsts.iter().filter_map(|&s| head(s)).collect());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use gpumem_common::limit_list;

    use super::{target_rules, Devices, Head};

    fn on(rules: &gpumem_common::TargetRules, e: usize) -> Vec<u32> {
        limit_list::slots_of(rules.on[e]).collect()
    }

    #[test]
    fn each_device_reads_the_slots_that_count_it() {
        let all = Head { slot: 3, devices: Devices::All, span: 0 };
        let one = Head { slot: 4, devices: Devices::One(1), span: 0 };
        let each = Head { slot: 10, devices: Devices::Each, span: 2 };
        let rules = target_rules(&[all, one, each]);
        assert_eq!(limit_list::slots_of(rules.heads).collect::<Vec<_>>(), [3, 4, 10]);
        assert_eq!(on(&rules, 0), [3, 11]);
        assert_eq!(on(&rules, 1), [3, 4, 12]);
        assert_eq!(on(&rules, 2), [3], "beyond the span only the rule over all devices counts");
        // Device 17 reads entry 1: the kernel checks rule 4's device.
        let far = target_rules(&[Head { slot: 4, devices: Devices::One(17), span: 0 }]);
        assert_eq!((on(&far, 1), on(&far, 0)), (vec![4], vec![]));
    }
}
