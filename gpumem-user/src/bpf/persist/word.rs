//! The handover word of a build's pins (`gpumem_common::handover`): read
//! from its pinned HANDOVER map, which every build taking part in one
//! takeover shares (the new build pins the old one's map again).
use std::path::Path;

use aya::maps::{Array, Map, MapData};
use gpumem_common::handover::{self, Handover};

/// `HANDOVER[0]` of the pinned map at `path`, and the map's id (the same
/// map pinned twice has one id); else why not.
pub fn read(path: &Path) -> Result<(u32, Handover), String> {
    let data = MapData::from_pin(path).map_err(|e| match path.exists() {
        false => "it predates takeovers (it has no HANDOVER map), so its programs cannot be told to stand by"
            .to_string(),
        true => format!("opening its HANDOVER map {}: {e}", path.display()),
    })?;
    let id = data.info().map_err(|e| format!("reading its HANDOVER map's id: {e}"))?.id();
    let map = Map::from_map_data(data).map_err(|e| format!("opening its HANDOVER map: {e}"))?;
    let array: Array<MapData, Handover> =
        Array::try_from(map).map_err(|e| format!("opening its HANDOVER map: {e}"))?;
    let value = array.get(&0, 0).map_err(|e| format!("reading its HANDOVER map: {e}"))?;
    Ok((id, value))
}

/// The word in words, for logs and refusals.
pub fn describe(word: u64) -> String {
    match handover::parts(word) {
        (0, _, 0) => "no build named yet".to_string(),
        (0, _, owner) => format!("steady: build tag {owner:#x} runs"),
        (handover::JOINING, old, new) => {
            format!("joining: build tag {old:#x} runs, {new:#x} attaches beside it")
        }
        (handover::LEAVING, old, new) => format!("leaving: build tag {new:#x} runs, {old:#x}'s links go"),
        _ => format!("unknown word {word:#x}"),
    }
}
