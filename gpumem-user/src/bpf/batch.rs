//! Whole hash maps read thousands of entries a system call
//! (`BPF_MAP_LOOKUP_BATCH`, Linux 5.6), where aya 0.14's iteration makes
//! two an entry (the next key, then its value): the sweep's read of the
//! live map's spill (35,124 entries while the bench holds 100k
//! allocations) took 114 to 376 ms of a core that way, on its own thread
//! but on a 2-core host beside an event loop draining half a million
//! records a second. Each bucket is read whole under its lock; the map as
//! a whole is no more a snapshot than an iteration's (every reader here
//! takes an entry for what it was when read, and the kernel checks again
//! whatever the agent asks it to change). Where the kernel refuses the
//! command, the map is iterated as before.
use std::os::fd::AsFd;

use aya::{
    maps::{HashMap, IterableMap, MapData},
    Pod,
};

use super::multi::lookup_batch;

/// Entries asked for a call at first. A bucket holding more than that is
/// refused (ENOSPC, nothing read) and asked for again with twice as many,
/// up to [`MOST`].
const FIRST_ASK: usize = 4096;

/// The most entries asked for a call: a bucket longer than this (a map
/// of millions of entries, all in one bucket) is iterated instead.
const MOST: usize = 1 << 20;

/// Every entry of `map`, in batches where the kernel can (see the module's
/// text), else one at a time; an entry that cannot be read is left out, as
/// an iteration's `flatten` leaves it.
pub fn entries<K: Pod, V: Pod>(map: &HashMap<MapData, K, V>) -> Vec<(K, V)> {
    let mut all = Vec::new();
    for_each(map, |k, v| all.push((k, v)));
    all
}

/// [`entries`], each handed to `f` as it comes, a batch at a time: a
/// reader that keeps a part of each entry never holds the whole map's.
pub fn for_each<K: Pod, V: Pod>(map: &HashMap<MapData, K, V>, mut f: impl FnMut(K, V)) {
    match batched(map, FIRST_ASK, &mut f) {
        Ok(()) => {}
        // Refused at its first call (nothing handed on yet): one at a time.
        Err((0, e)) => {
            tracing::debug!("reading a hash map in batches: {e}; reading it an entry at a time");
            map.iter().flatten().for_each(|(k, v)| f(k, v));
        }
        // Refused after some (a fault no kernel is known to give): the
        // rest is left out, as unreadable entries are.
        Err((n, e)) => tracing::debug!("reading a hash map in batches: {e} after {n} entries"),
    }
}

/// Hands `map`'s entries to `f` in batches of `ask` entries at first; the
/// kernel's refusal, with how many entries were handed on before it.
fn batched<K: Pod, V: Pod>(
    map: &HashMap<MapData, K, V>,
    mut ask: usize,
    f: &mut impl FnMut(K, V),
) -> Result<(), (usize, std::io::Error)> {
    let fd = map.map().fd().as_fd();
    let (mut keys, mut values) = (Vec::<K>::with_capacity(ask), Vec::<V>::with_capacity(ask));
    let (mut handed, mut place) = (0, None);
    loop {
        // SAFETY: both buffers have room for `ask` entries; aya checked the
        // map's key and value sizes against K and V when it typed it.
        let (written, next, result) = unsafe {
            lookup_batch(fd, place, keys.as_mut_ptr().cast(), values.as_mut_ptr().cast(), ask as u32)
        };
        let done = match result {
            Ok(()) => false,
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOENT) => true,
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) && ask < MOST => {
                ask *= 2;
                (keys, values) = (Vec::with_capacity(ask), Vec::with_capacity(ask));
                continue;
            }
            Err(e) => return Err((handed, e)),
        };
        // SAFETY: the kernel wrote `written` (at most `ask`) whole keys and
        // values, plain data of the map's types.
        unsafe {
            keys.set_len(written as usize);
            values.set_len(written as usize);
        }
        handed += keys.len();
        keys.drain(..).zip(values.drain(..)).for_each(|(k, v)| f(k, v));
        if done {
            return Ok(());
        }
        place = Some(next);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use aya::maps::{HashMap, Map, MapData};

    use crate::bpf::multi::{create_map, MapDef};

    /// A hash map of `entries` u64 keys, each holding its key times 3
    /// (None, said, where this user may not create one).
    fn filled(entries: u32) -> Option<HashMap<MapData, u64, u64>> {
        let hash = aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_HASH as u32;
        let def = MapDef { kind: hash, key: 8, value: 8, entries, flags: 0 };
        let fd = match create_map("batch_test", &def) {
            Ok(fd) => fd,
            Err(e) => {
                eprintln!("skipped: creating a BPF hash map needs root or CAP_BPF ({e})");
                return None;
            }
        };
        let data = MapData::from_fd(fd).expect("the map just created");
        let mut map: HashMap<MapData, u64, u64> = HashMap::try_from(Map::HashMap(data)).expect("a hash map");
        for k in 0..u64::from(entries) {
            map.insert(k * 7919, k * 7919 * 3, 0).expect("room for every key");
        }
        Some(map)
    }

    /// Every entry comes back once with its value, over many batches and
    /// when the first ask is smaller than a bucket (asked again, larger),
    /// and a map with nothing in it reads as nothing.
    #[test]
    fn a_hash_map_read_in_batches_is_read_whole() {
        let Some(map) = filled(10_000) else { return };
        let expected: BTreeMap<u64, u64> = (0..10_000u64).map(|k| (k * 7919, k * 7919 * 3)).collect();
        let read_asking = |ask: usize| {
            let mut read = Vec::new();
            super::batched(&map, ask, &mut |k, v| read.push((k, v))).map_err(|(_, e)| e).map(|()| read)
        };
        for ask in [1, 3, 64, super::FIRST_ASK] {
            let read = read_asking(ask).expect("the kernel reads hash maps in batches");
            assert_eq!(read.len(), expected.len(), "asking {ask} at first: each entry once");
            assert_eq!(read.into_iter().collect::<BTreeMap<_, _>>(), expected, "asking {ask} at first");
        }
        assert_eq!(super::entries(&map).len(), 10_000);
        let Some(mut empty) = filled(1) else { return };
        empty.remove(&0).expect("its one key");
        let mut read = Vec::new();
        super::batched(&empty, 16, &mut |k, v| read.push((k, v))).expect("an empty map reads");
        assert_eq!(read, []);
    }
}
