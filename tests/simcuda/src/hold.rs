//! A call held inside the driver, for tests of a call in flight while
//! something changes around it (an agent taking over from another): with
//! `SIMCUDA_HOLD_BYTES=N` and `SIMCUDA_HOLD_AT=PATH` (a FIFO the test
//! made), a `cuMemAlloc_v2` of exactly N bytes, once inside the call,
//! creates `PATH.inside` and then opens the FIFO to read it to its end:
//! the call stays inside until the test opens the FIFO and closes it
//! again, as a real driver's allocation stays inside while the card
//! makes room. Unset, nothing is held.
use std::{io::Read, path::PathBuf, sync::OnceLock};

/// Holds the calling thread here if `bytes` is the size to hold.
pub fn maybe(bytes: usize) {
    let Some(at) = held_at(bytes) else { return };
    let inside = PathBuf::from(format!("{}.inside", at.display()));
    if let Err(e) = std::fs::write(&inside, b"") {
        eprintln!("simcuda: SIMCUDA_HOLD_AT: writing {}: {e}", inside.display());
        return;
    }
    match std::fs::File::open(at) {
        Ok(mut fifo) => {
            let _ = fifo.read_to_end(&mut Vec::new());
        }
        Err(e) => eprintln!("simcuda: SIMCUDA_HOLD_AT: opening {}: {e}", at.display()),
    }
}

/// Where `bytes` is held, if it is the size to hold; the settings read
/// once (the bench's loops call this every allocation).
fn held_at(bytes: usize) -> Option<&'static PathBuf> {
    static SETTING: OnceLock<Option<(usize, PathBuf)>> = OnceLock::new();
    let setting = SETTING.get_or_init(|| {
        let bytes = std::env::var("SIMCUDA_HOLD_BYTES").ok()?.parse().ok()?;
        Some((bytes, PathBuf::from(std::env::var_os("SIMCUDA_HOLD_AT")?)))
    });
    setting.as_ref().filter(|(wanted, _)| *wanted == bytes).map(|(_, at)| at)
}
