//! Loading gpumem's eBPF object and attaching it to driver libraries.
//!
//! `probes` is the table of what gets attached where; `symbols` resolves
//! symbols to file offsets; `discover` finds the libraries; `kernel` reads
//! the kernel's usage maps. The ring buffer reader lives with the agent's
//! event loop (`cmd::run`); the limit maps are written by `limits`.
pub mod attach;
#[cfg(test)]
mod back_edges;
pub mod batch;
pub mod btf_offset;
pub mod discover;
mod early_map;
mod error;
mod file_blocks;
pub mod handover;
pub mod hashed;
mod in_flight;
pub mod kernel;
mod live_table;
pub mod log;
mod multi;
mod object;
mod parallel_load;
pub mod persist;
pub mod placement;
pub mod probes;
pub mod rescan;
pub mod ring;
pub mod site;
pub mod skipped;
#[cfg(test)]
mod stack_check;
#[cfg(test)]
mod stack_depth;
pub mod symbols;
pub mod takeover;
mod task_calls;
mod view;
pub mod wake;

use aya::{
    programs::{
        links::FdLink, raw_trace_point::RawTracePointLinkId, uprobe::UProbeLinkId, ProgramError,
        RawTracePoint, RawTracePointRunOptions, TestRun,
    },
    Ebpf,
};

use self::{discover::Library, persist::Pins, site::Emulation};
pub use self::{error::BpfError, multi::LinkMode, object::Options};

/// The eBPF object, built by `build.rs`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gpumem"));
/// The same, with the programs' diagnostic log (`--bpf-log`).
static OBJECT_LOG: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gpumem-log"));

/// Whether this kernel loads programs for multi-uprobe links; else why not.
pub fn multi_links() -> Result<(), String> {
    multi::supported()
}

/// Whether this kernel lets uprobe programs write registers (what `deny`
/// needs): None if it does, else the kernel's reason. Asked with a program
/// of its own, before the object is opened.
pub fn register_write_refusal() -> Option<String> {
    multi::register_writes::refusal()
}

/// Program `name` of the object, as its type.
fn program<'a, P>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut P, BpfError>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(BpfError::MissingProgram(name))?
        .try_into()
        .map_err(|e| BpfError::Program { name, source: Box::new(e) })
}

/// What a skipped exit left that the kernel did not finish, for the
/// kernel's `release_gone` to finish (`Tracer::release_gone`). (An exited
/// or exec'd image's entries in the hash maps, which no exit finds, are
/// `hashed::Dead`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// A process (tgid) that exited while the kernel still has its usage
    /// entry of image `generation`: its release if its exit's run was
    /// skipped, and the entry deleted (an exit keeps it for the group's
    /// last threads).
    Process { tgid: u32, generation: u64 },
    /// A thread (pid_tgid) that exited with calls still in flight.
    Thread(u64),
}

/// One attachment this agent owns.
pub(crate) enum Link {
    /// A single uprobe (aya's perf link) of a program.
    Single(&'static str, UProbeLinkId),
    /// A multi-uprobe link: every site of one program in one library.
    Multi(&'static str, std::os::fd::OwnedFd),
}

impl Link {
    fn program(&self) -> &'static str {
        match self {
            Self::Single(p, _) | Self::Multi(p, _) => p,
        }
    }
}

/// The loaded object with its attachments. Dropping it detaches everything
/// but what is pinned (`--persist`).
pub struct Tracer {
    ebpf: Ebpf,
    /// The ELF `ebpf` was loaded from (the multi-link programs are
    /// relocated from it).
    object: &'static [u8],
    /// The uprobe programs, where they are loaded for multi-uprobe links
    /// (see `multi`); None: aya loaded them for single links.
    multi: Option<multi::MultiPrograms>,
    /// Whether the uprobe programs are loaded for multi-uprobe links
    /// (decided at open: pinned maps hold the choice, see `persist`).
    multi_links: bool,
    /// Each library attached, with the links this agent owns (none where
    /// they are pinned).
    links: Vec<(Library, Vec<Link>)>,
    /// Where maps and links are pinned (`--persist`).
    pins: Option<Pins>,
    /// This build's tag (`gpumem_common::handover`).
    build: u32,
    /// Another build's pinned state being taken over (`takeover`).
    takeover: Option<takeover::Takeover>,
    /// The calls in flight a takeover waits for (`in_flight`): the maps
    /// they are kept in, then the wait, before the old build's pins go.
    call_maps: Option<in_flight::CallMaps>,
    standing_down: Option<in_flight::StandingDown>,
    /// The layout a `HANDOVER` map this agent finds empty records
    /// (`takeover::fresh_layout`, read once at open).
    fresh_layout: u64,
    _tracepoint_links: Vec<RawTracePointLinkId>,
    /// What the running kernel emulates at a probe site (see `site`).
    emulation: Emulation,
    /// Why the program answering memory queries with a limit's view did
    /// not load (None: it did; see [`Self::view_refusal`]).
    view_refusal: Option<String>,
}

impl Drop for Tracer {
    /// Whatever way the agent ends, its own links close side by side (the
    /// pinned ones stay), before the programs and maps go.
    fn drop(&mut self) {
        self.detach_all();
        self.abandon_takeover();
    }
}

impl Tracer {
    /// Loads the object and every program, and attaches the exit and exec
    /// tracepoints, with the default options.
    pub fn load() -> Result<Self, BpfError> {
        let mut tracer = Self::open(Options::default())?;
        tracer.load_programs()?;
        Ok(tracer)
    }

    /// The object with its maps created and no program loaded yet (the
    /// costly part is [`Self::load_programs`]).
    pub fn open(options: Options) -> Result<Self, BpfError> {
        Self::open_pinned(options, None)
    }

    /// [`Self::open`], with every map pinned under `persist_root`, held
    /// (the maps an earlier agent of the same build pinned there are
    /// reused: see `persist`).
    pub fn open_pinned(
        options: Options,
        persist_root: Option<&persist::lock::RootLock>,
    ) -> Result<Self, BpfError> {
        let object = if options.bpf_log { OBJECT_LOG } else { OBJECT };
        if object.is_empty() {
            return Err(BpfError::NoObject);
        }
        // Part of the build's identity: a pinned prog array (TASK_STACK)
        // takes only programs of the attach type it first held.
        let multi_links = multi::chosen(options.links, options.bpf_log)?;
        let task_calls = task_calls::chosen();
        if let Err(why) = &task_calls {
            tracing::info!("calls in flight kept in a hash map only (slower): {why}");
        }
        let id = persist::identity(
            object,
            options.deny_by_registers,
            options.ring_bytes,
            multi_links,
            task_calls.is_ok(),
        );
        let build = persist::tag(&id);
        let maps = persist::map_names(object)?;
        crate::start_phases::done("choosing the links, the build's identity");
        let pins = persist_root.map(|root| Pins::open(root, &id)).transpose()?;
        let takeover = match (persist_root, pins.as_ref()) {
            (Some(root), Some(p)) => p
                .predecessor()
                .map(|old| takeover::prepare(root.path(), old, p, object, options.ring_bytes, build))
                .transpose()?,
            _ => None,
        };
        let fresh_layout = takeover::fresh_layout();
        let slots_by_region = takeover::table_slots_by_region(pins.as_ref(), fresh_layout);
        let settings = object::Settings { options, task_calls: task_calls.is_ok(), build, slots_by_region };
        let ebpf = object::load(object, &settings, pins.as_ref(), &maps).map_err(|e| {
            // The old build's maps pinned again under this build's
            // directory: nothing of a failed takeover stays.
            if let (Some(_), Some(pins)) = (&takeover, &pins) {
                let _ = persist::unpin(pins.dir());
            }
            BpfError::Load(Box::new(e))
        })?;
        Ok(Self {
            call_maps: in_flight::CallMaps::for_takeover(&ebpf, takeover.is_some(), multi_links),
            ebpf,
            object,
            multi: None,
            multi_links,
            links: Vec::new(),
            pins,
            build,
            takeover,
            standing_down: None,
            fresh_layout,
            _tracepoint_links: Vec::new(),
            emulation: Emulation::current(),
            view_refusal: Some("the programs are not loaded yet".into()),
        })
    }

    /// Whether the uprobe programs are loaded for multi-uprobe links.
    pub fn multi_links(&self) -> bool {
        self.multi_links
    }

    /// Gives this tracer up after its programs failed to load, so that
    /// another can be opened in its place: a takeover it prepared is handed
    /// back (as on drop), and the pins it made for its build (where no
    /// earlier agent's were) are removed.
    pub fn discard(self) {
        if let Some(pins) = self.pins.as_ref().filter(|p| self.takeover.is_none() && !p.adopted()) {
            if let Err(e) = persist::unpin(pins.dir()) {
                tracing::warn!("removing the pins made at {}: {e}", pins.dir().display());
            }
        }
    }

    /// The programs' diagnostic log (`--bpf-log`), read from here on.
    pub fn take_log(&mut self) -> Result<log::BpfLog, BpfError> {
        log::BpfLog::take(&mut self.ebpf)
    }

    /// Loads (verifies) every program and attaches the exit and exec
    /// tracepoints.
    pub fn load_programs(&mut self) -> Result<(), BpfError> {
        let names = probes::programs();
        match self.multi_links {
            true => {
                let is_uprobe =
                    |n: &&str| matches!(self.ebpf.program(n), Some(aya::programs::Program::UProbe(_)));
                let (uprobes, rest): (Vec<&'static str>, Vec<&'static str>) =
                    names.iter().copied().partition(is_uprobe);
                // The view program is relocated with them, loaded later
                // (`load_view`).
                let later = [probes::VIEW_RETURN];
                // The rest (raw tracepoints) verify beside them.
                let multi = multi::MultiPrograms::load(self.object, &mut self.ebpf, &uprobes, &later, &rest)?;
                self.multi = Some(multi);
            }
            false => {
                parallel_load::load_programs(&mut self.ebpf, &names)?;
            }
        }
        crate::start_phases::done("verifying the programs");
        self.view_refusal = self.load_view();
        crate::start_phases::done("the view program (verified with the rest where links are multi)");
        self.claim()?;
        let ebpf = &mut self.ebpf;
        let mut tracepoint_links = Vec::new();
        for &(name, tracepoint) in probes::TRACEPOINTS {
            let pin = self.pins.as_ref().map(|p| p.tracepoint(name));
            if pin.as_ref().is_some_and(|p| p.exists()) {
                continue; // an earlier agent's, adopted
            }
            let prog: &mut RawTracePoint = program(ebpf, name)?;
            let link = prog
                .attach(tracepoint)
                .map_err(|e| BpfError::Tracepoint { tracepoint, source: Box::new(e) })?;
            match pin {
                Some(pin) => {
                    let link =
                        prog.take_link(link).map_err(|e| BpfError::Program { name, source: Box::new(e) })?;
                    persist::pin(FdLink::from(link), &pin)?;
                }
                None => tracepoint_links.push(link),
            }
        }
        self._tracepoint_links = tracepoint_links;
        crate::start_phases::done(
            "naming this build's programs (the handover), attaching the exit and exec tracepoints",
        );
        Ok(())
    }

    /// Where maps and links are pinned (`--persist`), and whether an
    /// earlier agent left them.
    pub fn pins(&self) -> Option<&Pins> {
        self.pins.as_ref()
    }

    /// Detaches every probe this agent owns from every library (pinned
    /// ones stay). Dropping the tracer afterwards unloads the programs.
    pub fn detach_all(&mut self) {
        // Every library's links in one batch: multi links close side by
        // side across libraries too.
        let all = std::mem::take(&mut self.links).into_iter().flat_map(|(_, links)| links).collect();
        self.detach_links(all);
    }

    /// Whether rows of `kind`'s library are attached here: libcuda's
    /// always, NVML's (memory queries only) where the view program loaded.
    pub fn serves(&self, kind: gpumem_common::api::Library) -> bool {
        kind == gpumem_common::api::Library::Cuda || self.view_refusal.is_none()
    }

    pub fn libraries(&self) -> impl Iterator<Item = &Library> {
        self.links.iter().map(|(l, _)| l)
    }

    /// Finishes, in the kernel, what an exit left (see [`Gone`]): a
    /// process's release, as its exit would have done (an `exit` record
    /// follows) where its run was skipped, and its usage entry's delete;
    /// or a thread's calls in flight. Gives back the program's result (1
    /// if it released the process; the calls it forgot), None if the
    /// kernel refused to run it.
    pub fn release_gone(&self, gone: Gone) -> Option<u32> {
        let mut opts = RawTracePointRunOptions::new();
        match gone {
            Gone::Process { tgid, generation } => {
                [opts.args[0], opts.args[2]] = [u64::from(tgid), generation]
            }
            Gone::Thread(pid_tgid) => opts.args[1] = pid_tgid,
        }
        let prog = self.ebpf.program(probes::RELEASE_GONE).map(<&RawTracePoint>::try_from)?.ok()?;
        prog.test_run(opts).ok().map(|r| r.return_value)
    }

    /// Has the kernel forget `dead` (`forget_dead`, which checks it again
    /// as it removes it): Some(1) if it did, Some(0) where the entry
    /// changed since it was read (or its image's release is under way),
    /// None if the kernel refused to run the program.
    pub fn forget_dead(&self, dead: hashed::Dead) -> Option<u32> {
        let mut opts = RawTracePointRunOptions::new();
        let key_args =
            |key: gpumem_common::LiveKey| [u64::from(key.tgid) | u64::from(key.ns) << 32, key.addr];
        match dead {
            hashed::Dead::Allocation { key, generation } => {
                [opts.args[0], opts.args[1]] = key_args(key);
                opts.args[2] = generation;
            }
            hashed::Dead::Mapping(key) => [opts.args[0], opts.args[1]] = key_args(key),
            hashed::Dead::Cgroup(id) => {
                [opts.args[0], opts.args[1]] = [u64::from(gpumem_common::ns::CGROUP) << 32, id]
            }
        }
        let prog = self.ebpf.program(probes::FORGET_DEAD).map(<&RawTracePoint>::try_from)?.ok()?;
        prog.test_run(opts).ok().map(|r| r.return_value)
    }

    /// A handle on program `name`, where it is loaded.
    pub fn program_fd(&self, name: &str) -> Option<aya::programs::ProgramFd> {
        self.ebpf.program(name)?.fd().ok()?.try_clone().ok()
    }

    /// A handle on every loaded program (for the kernel's per-program
    /// counters).
    pub fn program_fds(&self) -> Vec<aya::programs::ProgramFd> {
        self.ebpf.programs().filter_map(|(_, p)| p.fd().ok()?.try_clone().ok()).collect()
    }

    /// Takes a map out of the object, typed.
    pub fn take_map<M>(&mut self, name: &'static str) -> Result<M, BpfError>
    where
        M: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
    {
        M::try_from(self.take_any_map(name)?).map_err(|e| BpfError::Map { name, source: Box::new(e) })
    }

    /// The map `name`, taken out of the object, of whatever type.
    pub fn take_any_map(&mut self, name: &'static str) -> Result<aya::maps::Map, BpfError> {
        self.ebpf.take_map(name).ok_or(BpfError::MissingMap(name))
    }
}
