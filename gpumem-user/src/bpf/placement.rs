//! Where each probe-table row goes in one library: its function (aliases
//! probed once), the site in it (`site`), and the `ret` deny returns
//! through. Pure: what `Tracer::attach` attaches and what `gpumem probe
//! --libcuda` reports.
use std::collections::HashMap;

use gpumem_common::api::Library;
use serde::Serialize;

use super::{
    probes::{probes, Need, Probe},
    site::{self, Emulation, Site},
    symbols::SymbolOffsets,
};

/// Bumped whenever where a row's probe sits in its function changes: two
/// builds that probe one function at different offsets cannot hand over
/// (see `takeover::layout`).
pub const VERSION: u32 = 1;

/// One row, placed.
#[derive(Debug, Clone, Copy)]
pub struct Placed {
    pub probe: Probe,
    /// The function's first byte, as a file offset.
    pub function: u64,
    pub site: Site,
    /// The distance from the site to a `ret` instruction after it (what
    /// `deny` jumps to), if one was found.
    pub ret: Option<u32>,
}

impl Placed {
    /// Where the probe goes, as a file offset.
    pub fn offset(&self) -> u64 {
        self.function + u64::from(self.site.offset)
    }
}

/// Every row of the table, placed in one library.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub placed: Vec<Placed>,
    /// Optional symbols the library does not export.
    pub missing: Vec<&'static str>,
    /// Required symbols the library does not export.
    pub missing_required: Vec<&'static str>,
    /// Symbols at the same address as an earlier row: probed once, by the
    /// earlier row, or every call would count twice.
    pub aliases: Vec<(&'static str, &'static str)>,
}

/// Places every row of library `kind`'s part of the table in the file
/// `symbols` describes, for a kernel that emulates `emulation`.
pub fn plan(symbols: &SymbolOffsets, emulation: Emulation, kind: Library) -> Plan {
    let mut plan = Plan::default();
    let mut by_offset: HashMap<u64, &'static str> = HashMap::new();
    for probe in probes().filter(|p| p.api.library == kind) {
        let (Some(function), Some(code)) = (symbols.offset(probe.symbol()), symbols.code(probe.symbol()))
        else {
            match probe.api.need {
                Need::Required => plan.missing_required.push(probe.symbol()),
                Need::Optional => plan.missing.push(probe.symbol()),
            }
            continue;
        };
        if let Some(first) = by_offset.get(&function) {
            plan.aliases.push((probe.symbol(), first));
            continue;
        }
        by_offset.insert(function, probe.symbol());
        let site = site::choose(code, emulation);
        let ret = site::ret_after(code, site.offset as usize).map(|r| r - site.offset);
        plan.placed.push(Placed { probe, function, site, ret });
    }
    plan
}

/// A placed row as `gpumem probe --libcuda --json` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct SiteLine {
    pub symbol: &'static str,
    /// The probe's site, bytes from the function's start.
    pub offset: u32,
    pub how: site::How,
    /// Bytes from the site to the `ret` deny returns through.
    pub ret: Option<u32>,
}

impl From<&Placed> for SiteLine {
    fn from(p: &Placed) -> Self {
        Self { symbol: p.probe.symbol(), offset: p.site.offset, how: p.site.how, ret: p.ret }
    }
}
