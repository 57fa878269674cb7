//! The costliest maps to create (the live map, `LIVE`, a hash map of a
//! million entries, and the preallocated hash and LRU maps), created on a
//! thread of their own while aya's loader parses the kernel's BTF, rather
//! than inside aya's load, one map after another: the kernel allocates and
//! zeroes the live map's million buckets (16 MiB) at creation, 13 to 15 ms
//! of every start, and every element of a preallocated map, 0.4 to 3 ms
//! each, on one core while the other had nothing to do.
//!
//! aya takes a map from outside only through a pin (`map_pin_path`: a map
//! pinned where it is told to pin one is opened, not created), so the
//! thread pins each: where `--persist` keeps its maps, at the map's own
//! pin (which aya would have made there itself), else at a pin of this
//! start's own in bpffs (`gpumem-start-PID-NAME`), removed as soon as
//! aya's load has opened it, whether the load worked or not. One left by
//! an agent that died in between (its pid gone) is removed by the next
//! start. Where bpffs is not mounted at /sys/fs/bpf (and no `--persist`
//! mounted it), or anything of this fails for a map (a definition not
//! found), aya's load creates the map as before.
use std::{
    io,
    path::{Path, PathBuf},
    thread::JoinHandle,
};

use aya::EbpfLoader;

use super::{
    multi::{self, MapDef},
    persist::bpffs::{on_bpffs, BPFFS},
};

/// This start's own pins go in bpffs's root, named thus.
const PREFIX: &str = "gpumem-start-";

/// The maps created early, the costliest first (each took 0.4 ms or more
/// of aya's load, `strace -T`, 2026-12-02). Not the ring buffer, whose
/// size the agent sets in the loader.
pub const EARLY: &[&str] = &[
    "LIVE",
    "POD_SEEN",
    "THREAD_CTX",
    "PROC_USAGE",
    "LIVE_TABLE",
    "PENDING",
    "VMM_MAPPINGS",
    "LEADER_GONE",
    "CGROUP_LIMITS",
    "CGROUP_USAGE",
    "CTX_DEVICE",
    "CALLERS",
    "HANDOVER_MARKS",
];

/// One map to make, and where it will be pinned.
struct Early {
    name: &'static str,
    def: MapDef,
    path: PathBuf,
    /// A pin of this start's own, removed after aya's load.
    own_pin: bool,
}

/// The maps being created: the thread gives each back with what came of it.
pub struct EarlyMaps {
    thread: JoinHandle<Vec<(Early, io::Result<()>)>>,
}

impl EarlyMaps {
    /// Starts creating `names`' maps as `object` defines them, each to be
    /// pinned where `pinned_at` says (`--persist`'s pin of it) or at a pin
    /// of this start's own. A map whose pin exists (an earlier agent's,
    /// reused) or which the object does not define is left to aya's load;
    /// None where that leaves nothing.
    pub fn start(
        object: &[u8],
        names: &[&'static str],
        pinned_at: impl Fn(&'static str) -> Option<PathBuf>,
    ) -> Option<Self> {
        let mut maps = Vec::new();
        // Checked once: without bpffs there, a map made for a pin of this
        // start's own could not be handed over, only made twice.
        let mut bpffs = None;
        for &name in names {
            let Some(def) = definition(object, name) else { continue };
            let (path, own_pin) = match pinned_at(name) {
                Some(p) if p.exists() => continue,
                Some(p) => (p, false),
                None if !*bpffs.get_or_insert_with(bpffs_mounted) => continue,
                None => (Path::new(BPFFS).join(format!("{PREFIX}{}-{name}", std::process::id())), true),
            };
            maps.push(Early { name, def, path, own_pin });
        }
        if maps.is_empty() {
            return None;
        }
        let thread = std::thread::Builder::new()
            .name("gpumem-maps".into())
            .spawn(move || {
                if maps.iter().any(|m| m.own_pin) {
                    remove_stale();
                }
                maps.into_iter()
                    .map(|m| {
                        let made = multi::create_map(m.name, &m.def).and_then(|fd| multi::pin(&fd, &m.path));
                        (m, made)
                    })
                    .collect()
            })
            .ok()?;
        Some(Self { thread })
    }

    /// Waits for the maps and, for each made and pinned, tells `loader` to
    /// open it there.
    pub fn hand_to<'a>(self, loader: &mut EbpfLoader<'a>) -> Pinned {
        let Ok(made) = self.thread.join() else {
            tracing::debug!("the thread making maps early panicked; aya's load makes them");
            return Pinned { own: Vec::new() };
        };
        let mut own = Vec::new();
        for (m, result) in made {
            match result {
                Ok(()) => {
                    loader.map_pin_path(m.name, m.path.clone());
                    if m.own_pin {
                        own.push(m.path);
                    }
                }
                Err(e) => tracing::debug!("map {} made early: {e}; aya's load makes it", m.name),
            }
        }
        Pinned { own }
    }
}

/// This start's own pins, until aya's load has opened the maps.
#[must_use = "the pins must be removed after aya's load"]
pub struct Pinned {
    own: Vec<PathBuf>,
}

impl Pinned {
    /// Removes this start's own pins (aya holds the maps by then, or its
    /// load failed and nothing should).
    pub fn remove(self) {
        for path in self.own {
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(
                    "removing {}: {e} (remove it by hand: it holds one of gpumem's maps)",
                    path.display()
                );
            }
        }
    }
}

/// `name`'s legacy definition in the object's `maps` section.
fn definition(object: &[u8], name: &str) -> Option<MapDef> {
    use object::{Object, ObjectSection, ObjectSymbol};
    let file = object::File::parse(object).ok()?;
    let section = file.section_by_name("maps")?;
    let symbol =
        file.symbols().find(|s| s.name() == Ok(name) && s.section_index() == Some(section.index()))?;
    let data = section.data().ok()?;
    let at = usize::try_from(symbol.address().checked_sub(section.address())?).ok()?;
    let word =
        |i: usize| data.get(at + 4 * i..at + 4 * i + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    Some(MapDef { kind: word(0)?, key: word(1)?, value: word(2)?, entries: word(3)?, flags: word(4)? })
}

/// Whether bpffs is mounted at [`BPFFS`] (`--persist` mounts it where
/// not; a plain start leaves the host's mounts alone).
fn bpffs_mounted() -> bool {
    on_bpffs(Path::new(BPFFS)).unwrap_or(false)
}

/// Removes pins of earlier starts whose agents are gone.
fn remove_stale() {
    let Ok(dir) = std::fs::read_dir(BPFFS) else { return };
    // This pid's own: an agent's that died before this one got its pid.
    let gone = |pid: u32| pid == std::process::id() || !Path::new("/proc").join(pid.to_string()).exists();
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)).and_then(|r| r.split('-').next())
        else {
            continue;
        };
        if pid.parse::<u32>().is_ok_and(gone) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every map made early is one of the object's, of a kind made whole
    /// at creation (the ring buffer's size is the agent's to set).
    #[test]
    fn every_early_map_is_the_object_s() {
        let object: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gpumem"));
        use aya_obj::generated::bpf_map_type::*;
        let kinds = [BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_LRU_HASH, BPF_MAP_TYPE_ARRAY].map(|k| k as u32);
        for name in super::EARLY {
            let def = super::definition(object, name).unwrap_or_else(|| panic!("{name} in the maps section"));
            assert!(kinds.contains(&def.kind), "{name} is of kind {}", def.kind);
            assert!(def.entries > 0, "{name}");
        }
    }

    #[test]
    fn the_live_map_s_definition_is_read_from_the_object() {
        let object: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gpumem"));
        let def = super::definition(object, "LIVE").expect("LIVE in the object's maps section");
        let hash = aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_HASH as u32;
        let key = std::mem::size_of::<gpumem_common::LiveKey>() as u32;
        let value = std::mem::size_of::<gpumem_common::LiveAlloc>() as u32;
        let no_prealloc = aya_obj::generated::BPF_F_NO_PREALLOC;
        let entries = gpumem_common::LIVE_ENTRIES;
        assert_eq!(def, super::MapDef { kind: hash, key, value, entries, flags: no_prealloc });
        assert_eq!(super::definition(object, "NO_SUCH_MAP"), None);
    }
}
