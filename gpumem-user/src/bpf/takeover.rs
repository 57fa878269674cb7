//! Taking over another build's pinned state with no gap (`gpumem run
//! --persist` finding another build's pins): what may be carried, checked
//! before anything is created; the maps carried by pinning them again in
//! this build's directory, so the loader opens them in place of creating
//! its own. The moves of the handover word that follow (new programs
//! attached beside the old, then running in their place, then the old
//! links removed) are `handover.rs`; the protocol that loses no hit is
//! `gpumem_common::handover`.
use std::path::{Path, PathBuf};

use aya::maps::{MapData, MapInfo};
use gpumem_common::{handover, map_name};

use super::persist::{word, PersistError, Pins};

/// Maps each build has of its own, never carried: the empty program array
/// every uprobe program tail-calls (it holds only programs of the attach
/// type it first held), the programs' log, when each CPU last looked at
/// the ring's backlog or the idle agent's mark (each build's programs
/// space their own wake-ups, and each agent marks its own), and the
/// per-CPU place a process's first usage entry is built in.
const OWN_MAPS: &[&str] = &["TASK_STACK", "AYA_LOGS", "WAKE_AT", "PROC_FRESH"];

/// Maps this build creates fresh where the old build has none: builds
/// before task storage kept every call in flight in `PENDING`, which is
/// carried, and this build's returns look there after their own task's
/// slot. (The other way, a build without it taking over from one with
/// it, is refused: its returns would not find the calls kept there.)
/// Builds before the kept walks of cgroups' limits (`CGROUP_LIMITS`,
/// valid under `LIMIT_INDEX_GENERATION`) walked at every call: both
/// start empty, which walks every cgroup again. Builds before `TASK_CTX`
/// (with `CTX_DEVICE_GENERATION`) kept threads' contexts in `THREAD_CTX`,
/// carried, which this build reads for a thread that has set none since.
/// Builds before the live table (`LIVE_TABLE`, with `LIVE_SPILLED`) kept
/// every live allocation in `LIVE`, carried: both start empty, and this
/// build marks `LIVE` spilled (`Tracer::claim`), so that its frees and
/// allocations look there for the old build's entries.
/// An older build taking over from this one is refused for each map it
/// lacks ("it keeps state in a map ... this build does not have"): a
/// rollback goes through a restart without `--persist`'s pins (`gpumem
/// detach`), as docs/persist.md says.
const NEW_MAPS: &[&str] = &[
    "TASK_CALLS",
    "CGROUP_LIMITS",
    "LIMIT_INDEX_GENERATION",
    "TASK_CTX",
    "CTX_DEVICE_GENERATION",
    "LIVE_TABLE",
    "LIVE_SPILLED",
];

/// What two builds must share to hand over, as one number: the shared
/// maps' meaning (`handover::LAYOUT`), the probe table (each row's symbol,
/// API id, kind and programs: the cookies and the marks are made of
/// them), the cookie's encoding and where probes sit (`placement::VERSION`:
/// two builds probing one function at different offsets would not run in
/// the order the protocol relies on). A fresh map records it; a takeover
/// requires the old build's to equal it.
pub fn layout() -> u64 {
    layout_of(handover::LAYOUT)
}

/// [`layout`] with the shared maps' layout `base`.
fn layout_of(base: u64) -> u64 {
    let mut bytes: Vec<u8> = Vec::new();
    let mut eat = |b: &[u8]| bytes.extend(b.iter().copied().chain([0xff]));
    eat(&base.to_le_bytes());
    eat(&super::placement::VERSION.to_le_bytes());
    eat(&gpumem_common::cookie::pack(0x1234, 0x56, 0x78_9abc).to_le_bytes());
    for p in super::probes::probes() {
        eat(p.symbol().as_bytes());
        eat(&[p.api.id.to_le_bytes(), p.api.kind.to_le_bytes()].concat());
        eat(p.entry.as_bytes());
        eat(p.ret.unwrap_or_default().as_bytes());
    }
    super::persist::fnv1a(bytes)
}

/// Whether a table of the state recorded as `layout` (the `HANDOVER`
/// map's, written when its maps were made) places its slots by region:
/// Some(true) for this build's layout, Some(false) for the layout before
/// (`handover::SCATTERED_SLOTS_LAYOUT`, the same probes and maps, the
/// slots placed by the whole address), None for any other.
pub fn slots_by_region(layout: u64) -> Option<bool> {
    if layout == self::layout() {
        Some(true)
    } else if layout == layout_of(handover::SCATTERED_SLOTS_LAYOUT) {
        Some(false)
    } else {
        None
    }
}

/// The layout a fresh `HANDOVER` map records: this build's, or the one
/// before where `GPUMEM_LAYOUT_FOR_A_TEST=3` asks (a testing aid: the
/// agent then makes its state as a build of layout 3 did, slots placed by
/// the whole address, for a test of a takeover from one).
pub fn fresh_layout() -> u64 {
    match std::env::var("GPUMEM_LAYOUT_FOR_A_TEST") {
        Ok(v) if v == handover::SCATTERED_SLOTS_LAYOUT.to_string() => {
            tracing::warn!(
                "GPUMEM_LAYOUT_FOR_A_TEST={v}: a testing aid, the state made as layout {v} made it"
            );
            layout_of(handover::SCATTERED_SLOTS_LAYOUT)
        }
        Ok(v) => {
            tracing::warn!("GPUMEM_LAYOUT_FOR_A_TEST={v:?} is not 3: ignored");
            layout()
        }
        Err(_) => layout(),
    }
}

/// Whether the live table under `pins` (carried from another build, or
/// this build's own from an earlier run) or, where none is pinned yet,
/// the one this agent makes (recorded as `fresh`, [`fresh_layout`])
/// places its slots by region.
pub fn table_slots_by_region(pins: Option<&Pins>, fresh: u64) -> bool {
    let recorded = pins
        .and_then(|p| word::read(&p.map(map_name::HANDOVER)).ok())
        .map(|(_, h)| h.layout)
        .filter(|&l| l != 0);
    let by_region = slots_by_region(recorded.unwrap_or(fresh)).unwrap_or(true);
    if !by_region {
        tracing::info!(
            "the live table was made by a build of layout {}: its slots stay placed as that build placed them \
             (a fresh start, after `gpumem detach`, places them by region)",
            handover::SCATTERED_SLOTS_LAYOUT
        );
    }
    by_region
}

/// A takeover under way: the old build and where its pins are.
#[derive(Debug, Clone)]
pub struct Takeover {
    /// The old build's pin directory (removed once this build runs).
    pub from: PathBuf,
    /// The old build's identity (its directory's name).
    pub build: String,
    /// The old build's tag, as its programs know it.
    pub tag: u32,
}

/// A map's shape as the kernel holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    kind: u32,
    key: u32,
    value: u32,
    entries: u32,
    flags: u32,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "type {}, key {} B, value {} B, {} entries, flags {:#x}",
            self.kind, self.key, self.value, self.entries, self.flags
        )
    }
}

/// Checks that this build (its `object`, ring buffer of `ring_bytes`, tag
/// `ours`) can take over the state pinned at `root/<old>`, and carries
/// its maps into `pins`: each pinned again under this build's directory.
/// A refusal says why and what to do, and leaves the old pins as they
/// were.
pub fn prepare(
    root: &Path,
    old: &str,
    pins: &Pins,
    object: &[u8],
    ring_bytes: u32,
    ours: u32,
) -> Result<Takeover, PersistError> {
    let from = root.join(old);
    let refuse = |why: String| PersistError::OtherBuild {
        root: root.display().to_string(),
        dir: from.display().to_string(),
        found: old.to_string(),
        ours: pins.dir().file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned()),
        why,
    };
    let tag = super::persist::tag(old);
    let (_, state) = word::read(&from.join("maps").join(map_name::HANDOVER)).map_err(&refuse)?;
    if slots_by_region(state.layout).is_none() {
        return Err(refuse(format!(
            "its maps, probe table or probe sites differ from this build's (layout {:#x}, this build's {:#x})",
            state.layout,
            layout()
        )));
    }
    // A word part way (a takeover of it interrupted, the other build's
    // pins since removed) is taken over as it stands, if it runs.
    if handover::owner(state.word) != tag {
        // Not that build's to adopt either: no agent can tell what runs.
        return Err(PersistError::Interrupted {
            root: root.display().to_string(),
            count: 1,
            why: format!(
                "the handover word of build {old}'s pins names another build, whose pins are gone ({})",
                word::describe(state.word)
            ),
        });
    }
    if tag == ours {
        return Err(refuse("the two builds' 31-bit tags collide".into()));
    }
    let carried = carried_maps(&from.join("maps"), object, ring_bytes).map_err(&refuse)?;
    pins.create()?;
    if let Err(e) = carry(&from, pins, &carried) {
        let _ = super::persist::unpin(pins.dir());
        return Err(e);
    }
    Ok(Takeover { from, build: old.to_string(), tag })
}

/// Pins each of the old build's `maps` again under `pins`.
fn carry(from: &Path, pins: &Pins, maps: &[String]) -> Result<(), PersistError> {
    for name in maps {
        let (there, here) = (from.join("maps").join(name), pins.map(name));
        let pinned = MapData::from_pin(&there)
            .map_err(|e| e.to_string())
            .and_then(|m| m.pin(&here).map_err(|e| e.to_string()));
        pinned.map_err(|why| PersistError::Pin { path: here.display().to_string(), why })?;
    }
    Ok(())
}

/// The maps to carry: every map of `object` but its own, each pinned under
/// `maps` with the same shape; else why not.
fn carried_maps(maps: &Path, object: &[u8], ring_bytes: u32) -> Result<Vec<String>, String> {
    let obj = aya_obj::Object::parse(object).map_err(|e| format!("reading this build's object: {e}"))?;
    let shared = |name: &str| !name.contains('.') && !OWN_MAPS.contains(&name);
    let mut carried = Vec::new();
    for (name, map) in obj.maps.iter().filter(|(n, _)| shared(n)) {
        let entries = if name == map_name::EVENTS { ring_bytes } else { map.max_entries() };
        let ours = Shape {
            kind: map.map_type(),
            key: map.key_size(),
            value: map.value_size(),
            entries,
            flags: map.map_flags(),
        };
        let Ok(info) = MapInfo::from_pin(maps.join(name)) else {
            if NEW_MAPS.contains(&name.as_str()) {
                continue;
            }
            return Err(format!("it has no map {name}, which this build keeps state in"));
        };
        let theirs = Shape {
            kind: info.map_type().map_or(u32::MAX, |t| t as u32),
            key: info.key_size(),
            value: info.value_size(),
            entries: info.max_entries(),
            flags: info.map_flags(),
        };
        if name == map_name::EVENTS && theirs != ours && (Shape { entries, ..theirs }) == ours {
            return Err(format!(
                "its ring buffer is {} bytes and this agent's {ring_bytes}; start this agent with \
                 --ring-buffer {}",
                theirs.entries, theirs.entries
            ));
        }
        if theirs != ours {
            return Err(format!("its map {name} is ({theirs}), this build's ({ours})"));
        }
        carried.push(name.clone());
    }
    for entry in std::fs::read_dir(maps).map_err(|e| format!("reading {}: {e}", maps.display()))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if shared(&name) && !carried.contains(&name) {
            return Err(format!("it keeps state in a map {name} this build does not have"));
        }
    }
    Ok(carried)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This build's state places slots by region, the layout before's by
    /// the whole address; any other layout is not taken over.
    #[test]
    fn the_recorded_layout_says_how_the_live_table_places_its_slots() {
        assert_eq!(slots_by_region(layout()), Some(true));
        assert_eq!(slots_by_region(layout_of(handover::SCATTERED_SLOTS_LAYOUT)), Some(false));
        assert_eq!(slots_by_region(layout_of(2)), None);
        assert_eq!(slots_by_region(0), None);
        assert_ne!(layout(), layout_of(handover::SCATTERED_SLOTS_LAYOUT));
    }
}
