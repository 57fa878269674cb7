//! The live map (`LIVE`, a hash map of a million entries), created on a
//! thread of its own while aya's loader parses the kernel's BTF, rather
//! than inside aya's load, one map after another: the kernel allocates and
//! zeroes its million buckets (16 MiB) at creation, 13 to 15 ms of every
//! start on one core while the other had nothing to do.
//!
//! aya takes a map from outside only through a pin (`map_pin_path`: a map
//! pinned where it is told to pin one is opened, not created), so the
//! thread pins it: where `--persist` keeps its maps, at the map's own pin
//! (which aya would have made there itself), else at a pin of this start's
//! own in bpffs (`gpumem-start-PID-LIVE`), removed as soon as aya's load
//! has opened it, whether the load worked or not. One left by an agent
//! that died in between (its pid gone) is removed by the next start.
//! Where anything of this fails (no bpffs at /sys/fs/bpf, a definition not
//! found) aya's load creates the map as before.
use std::{
    io,
    path::{Path, PathBuf},
    thread::JoinHandle,
};

use aya::EbpfLoader;

use super::multi::{self, MapDef};

/// Where this start's own pins go (bpffs).
const BPFFS: &str = "/sys/fs/bpf";
const PREFIX: &str = "gpumem-start-";

/// The map being created, and where it will be pinned.
pub struct EarlyMap {
    path: PathBuf,
    /// A pin of this start's own, removed after aya's load.
    own_pin: bool,
    thread: JoinHandle<io::Result<()>>,
}

impl EarlyMap {
    /// The map created early.
    pub const NAME: &'static str = "LIVE";

    /// Starts creating `LIVE` as `object` defines it, to be pinned at
    /// `pinned_at` (`--persist`'s pin of it) or at a pin of this start's
    /// own. None where there is nothing to do (`pinned_at` exists: an
    /// earlier agent's map, reused) or the object has no such map.
    pub fn start(object: &[u8], pinned_at: Option<PathBuf>) -> Option<Self> {
        let def = definition(object, Self::NAME)?;
        let (path, own_pin) = match pinned_at {
            Some(p) if p.exists() => return None,
            Some(p) => (p, false),
            None => (Path::new(BPFFS).join(format!("{PREFIX}{}-{}", std::process::id(), Self::NAME)), true),
        };
        let at = path.clone();
        let thread = std::thread::Builder::new()
            .name("gpumem-live-map".into())
            .spawn(move || {
                if own_pin {
                    remove_stale();
                }
                let fd = multi::create_map(Self::NAME, &def)?;
                multi::pin(&fd, &at)
            })
            .ok()?;
        Some(Self { path, own_pin, thread })
    }

    /// Waits for the map and, where it was made and pinned, tells `loader`
    /// to open it there.
    pub fn hand_to<'a>(self, loader: &mut EbpfLoader<'a>) -> Pinned {
        let made = self.thread.join().unwrap_or_else(|_| Err(io::Error::other("the thread panicked")));
        match made {
            Ok(()) => {
                loader.map_pin_path(Self::NAME, self.path.clone());
                Pinned { own: self.own_pin.then_some(self.path) }
            }
            Err(e) => {
                tracing::debug!("the live map made early: {e}; aya's load makes it");
                Pinned { own: None }
            }
        }
    }
}

/// This start's own pin, until aya's load has opened the map.
#[must_use = "the pin must be removed after aya's load"]
pub struct Pinned {
    own: Option<PathBuf>,
}

impl Pinned {
    /// Removes this start's own pin (aya holds the map by then, or its
    /// load failed and nothing should).
    pub fn remove(self) {
        if let Some(path) = self.own {
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!("removing {}: {e} (remove it by hand: it holds a 16 MiB map)", path.display());
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
