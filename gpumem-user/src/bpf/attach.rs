//! Attaching the probe table to a library at the sites `placement` chose,
//! and detaching it. Nothing of a library stays attached when attaching it
//! fails. With `--persist`, each library's links are pinned (see
//! `persist`), and a library whose links an earlier agent pinned is
//! adopted, not attached again.
use std::path::Path;

use aya::programs::{
    links::FdLink,
    uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope},
    ProgramError, UProbe,
};

use super::{
    discover::Library,
    error::BpfError,
    persist::PersistError,
    placement::{plan, Placed},
    site::{Site, Summary},
    symbols::SymbolOffsets,
    Link, Tracer,
};

/// What attaching to one library did.
#[derive(Debug, Clone)]
pub struct AttachReport {
    pub library: Library,
    /// Symbols probed (entry and return), with where.
    pub attached: Vec<(&'static str, Site)>,
    /// Optional symbols this library does not export.
    pub missing: Vec<&'static str>,
    /// Symbols at the same address as an earlier row: probed once, by the
    /// earlier row, or every call would count twice.
    pub aliases: Vec<(&'static str, &'static str)>,
    /// Its probes were pinned by an earlier agent and are adopted as they
    /// are (`--persist`).
    pub adopted: bool,
    /// The multi-uprobe links holding its probes (0: one link per probe).
    pub multi_links: usize,
    /// How many of its probes have a return probe too (the others do all
    /// at the entry: frees).
    pub returns: usize,
    /// From reading its symbols to its last link made (or its pins
    /// found): the attach alone, the programs already verified.
    pub took: std::time::Duration,
}

impl AttachReport {
    /// How the probe sites run, counted.
    pub fn summary(&self) -> Summary {
        Summary::of(self.attached.iter().map(|(_, site)| site))
    }
}

impl Tracer {
    /// Attaches every probe-table row to `lib`. On failure nothing of this
    /// library stays attached.
    pub fn attach(&mut self, lib: &Library) -> Result<AttachReport, BpfError> {
        self.attach_programs(lib, None)
    }

    /// [`Self::attach`], with `programs` (entry, return) in place of every
    /// row's own (the return only where the row has one): the bench's
    /// floor.
    pub fn attach_programs(
        &mut self,
        lib: &Library,
        programs: Option<(&'static str, &'static str)>,
    ) -> Result<AttachReport, BpfError> {
        let started = std::time::Instant::now();
        let symbols = SymbolOffsets::load(&lib.path)?;
        let mut plan = plan(&symbols, self.emulation, lib.kind);
        if self.view_refusal.is_some() {
            // Not loaded here: limited processes see the card as it is.
            plan.placed.retain(|p| p.probe.ret != Some(super::probes::VIEW_RETURN));
        }
        if !plan.missing_required.is_empty() {
            let (path, symbols) = (lib.path.display().to_string(), plan.missing_required.join(", "));
            return Err(BpfError::MissingRequired { path, symbols });
        }
        let pin_dir = self.pins.as_ref().filter(|_| programs.is_none()).map(|p| p.library(lib.dev, lib.ino));
        let adopted = pin_dir.as_ref().is_some_and(|d| d.is_dir());
        let mut links: Vec<Link> = Vec::new();
        let mut multi_links = 0;
        if !adopted {
            let attached = if self.multi.is_some() {
                self.attach_multi(&plan.placed, programs, lib, &mut links)
            } else {
                plan.placed.iter().try_for_each(|placed| self.attach_row(placed, programs, lib, &mut links))
            };
            if let Err(e) = attached {
                self.detach_links(links);
                return Err(e);
            }
            multi_links = links.iter().filter(|l| matches!(l, Link::Multi(..))).count();
            if let Some(dir) = &pin_dir {
                self.pin_links(dir, std::mem::take(&mut links))?;
            }
        }
        self.links.push((lib.clone(), links));
        Ok(AttachReport {
            library: lib.clone(),
            attached: plan.placed.iter().map(|p| (p.probe.symbol(), p.site)).collect(),
            missing: plan.missing,
            aliases: plan.aliases,
            adopted,
            multi_links,
            returns: plan.placed.iter().filter(|p| p.probe.ret.is_some()).count(),
            took: started.elapsed(),
        })
    }

    /// Pins `links` in `dir`, one file each; on failure none of them stays
    /// attached or pinned.
    fn pin_links(&mut self, dir: &Path, links: Vec<Link>) -> Result<(), BpfError> {
        std::fs::create_dir(dir)
            .map_err(|e| BpfError::Persist(format!("creating {}: {e}", dir.display())))?;
        let mut rest = links.into_iter().enumerate();
        while let Some((i, link)) = rest.next() {
            let path = dir.join(format!("{i}_{}", link.program()));
            let pinned = match link {
                Link::Single(program, link) => self.pin_one(program, link, &path),
                Link::Multi(_, fd) => super::multi::pin(&fd, &path).map_err(|e| {
                    PersistError::Pin { path: path.display().to_string(), why: e.to_string() }.into()
                }),
            };
            if let Err(e) = pinned {
                self.detach_links(rest.map(|(_, l)| l).collect());
                // Unpinning detaches the ones already pinned (their
                // programs stay: this agent holds them).
                if let Err(undo) = super::persist::unpin(dir) {
                    tracing::warn!("{undo}");
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn pin_one(&mut self, name: &'static str, link: UProbeLinkId, path: &Path) -> Result<(), BpfError> {
        let prog: &mut UProbe = super::program(&mut self.ebpf, name)?;
        let link = prog.take_link(link).map_err(|e| BpfError::Program { name, source: Box::new(e) })?;
        let link = FdLink::try_from(link).map_err(|e| {
            BpfError::Persist(format!(
                "the kernel made no bpf link for `{name}` ({e}); --persist needs kernel 5.15+"
            ))
        })?;
        Ok(super::persist::pin(link, path)?)
    }

    /// Attaches one row's entry and return programs at its site in `lib`,
    /// adding their links to `links`.
    fn attach_row(
        &mut self,
        placed: &Placed,
        programs: Option<(&'static str, &'static str)>,
        lib: &Library,
        links: &mut Vec<Link>,
    ) -> Result<(), BpfError> {
        let p = &placed.probe;
        let cookie = gpumem_common::cookie::pack(p.api.id, p.api.kind, placed.ret.unwrap_or(0));
        for (program, _) in p.roles(programs) {
            let link = self.attach_one(program, placed.offset(), cookie, lib).map_err(|source| {
                BpfError::Attach {
                    program,
                    symbol: p.symbol(),
                    path: lib.path.display().to_string(),
                    source: Box::new(source),
                }
            })?;
            links.push(Link::Single(program, link));
        }
        Ok(())
    }

    /// Attaches a library's placed rows with one multi-uprobe link per
    /// program, adding them to `links`.
    fn attach_multi(
        &mut self,
        placed: &[Placed],
        programs: Option<(&'static str, &'static str)>,
        lib: &Library,
        links: &mut Vec<Link>,
    ) -> Result<(), BpfError> {
        let multi = self.multi.as_ref().ok_or(BpfError::Multi("the programs are not loaded".into()))?;
        for l in super::multi::group(placed, programs) {
            links.push(Link::Multi(l.program, multi.link(l.program, &lib.path, &l.sites, l.ret)?));
        }
        Ok(())
    }

    fn attach_one(
        &mut self,
        program: &'static str,
        offset: u64,
        cookie: u64,
        lib: &Library,
    ) -> Result<UProbeLinkId, ProgramError> {
        let prog: &mut UProbe = self.ebpf.program_mut(program).ok_or(ProgramError::NotLoaded)?.try_into()?;
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(offset),
            cookie: Some(cookie),
        };
        prog.attach(point, &lib.path, UProbeScope::AllProcesses)
    }

    /// Detaches `links`. Each single uprobe's detach waits for a kernel
    /// grace period under a lock the kernel holds across detaches: about
    /// 100 ms a probe here, however many threads close them (measured with
    /// strace). Multi links pay one grace period each and are closed side
    /// by side (see `multi`).
    pub(super) fn detach_links(&mut self, links: Vec<Link>) {
        let mut multi = Vec::new();
        for link in links.into_iter().rev() {
            match link {
                Link::Single(program, link) => {
                    if let Some(Ok(prog)) = self.ebpf.program_mut(program).map(<&mut UProbe>::try_from) {
                        // A detach that fails leaves nothing to undo: the
                        // link goes with its program when the object is
                        // dropped.
                        let _ = prog.detach(link);
                    }
                }
                Link::Multi(_, fd) => multi.push(fd),
            }
        }
        super::multi::close_all(multi);
    }
}
