//! Multi-uprobe links (`BPF_TRACE_UPROBE_MULTI`, kernel 6.6+): one link
//! per program and library, holding every site of that program with each
//! site's cookie, in place of one link per site.
//!
//! Why: a single uprobe link detaches through perf and the kernel's
//! `event_mutex`, a grace period each, one after another: `cargo xtask
//! bench` measured 11.6 s to stop with one library (106 links) and 231 s
//! with 20. A multi link pays one grace period, and
//! several close side by side (no shared lock): 30 multi links of 53 sites
//! each closed in 52 ms from parallel threads, 1.38 s one after another.
//!
//! aya 0.14 cannot load a program for such links (it sets no
//! `expected_attach_type` for uprobes), so the uprobe programs are loaded
//! here: aya-obj relocates the same object's instructions against the maps
//! aya created (`relocate`), and `sys` makes the two bpf(2) calls.
pub mod register_writes;
mod relocate;
mod sys;

use std::{collections::HashMap, os::fd::OwnedFd, path::Path};

use aya::Ebpf;

use super::{
    error::BpfError,
    parallel_load::{self, on_threads, Job},
};

pub use self::{
    relocate::data as map_data,
    sys::{create_map, lookup, lookup_batch, pin, MapDef},
};

/// How uprobes are linked (`--uprobe-links`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LinkMode {
    /// Multi-uprobe links where the kernel has them (6.6+), else single.
    #[default]
    Auto,
    /// One link per probe site (every kernel; slow to detach).
    Single,
    /// Multi-uprobe links, or an error where the kernel has none.
    Multi,
}

/// Whether this kernel makes multi-uprobe links; else why not. A trivial
/// program is loaded for them (some kernels load it and refuse only the
/// link: 6.1 does not check a kprobe program's attach type) and a link is
/// asked for on `/`, which a kernel with such links refuses only once it
/// has looked the path up and found no regular file (`EBADF`; libbpf asks
/// the same way). No link is made, so none has to be closed: a test link
/// on a real file cost a grace period at its close (about 30 ms of every
/// start), and a thread left closing it could still be exiting while the
/// agent attached its tracepoints (the 6.18 guest under QEMU's emulation
/// once died of an int3 oops in `do_exit` in a gpumem process).
pub fn supported() -> Result<(), String> {
    static ANSWER: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    ANSWER.get_or_init(test_link).clone()
}

fn test_link() -> Result<(), String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease");
    let release = release.as_deref().map_or("(release unknown)", str::trim).to_string();
    let no = |e: &dyn std::fmt::Display| {
        format!("kernel {release} makes no multi-uprobe links ({e}; 6.6 and newer do)")
    };
    // r0 = 0; exit
    let insns = [sys::insn(0xb7, 0, 0, 0), sys::insn(0x95, 0, 0, 0)];
    let prog = sys::load("gpumem_multi", &insns).map_err(|e| no(&e.error))?;
    match sys::link(&prog, Path::new("/"), &[0], &[0], false) {
        Err(e) if e.raw_os_error() == Some(nix::libc::EBADF) => Ok(()),
        // Not a kernel that ever links `/`; had one, the link is closed here.
        Ok(_) => Ok(()),
        Err(e) => Err(no(&e)),
    }
}

/// Whether `mode` gives multi links on this kernel, for the object with
/// logging (`--bpf-log`) or without; an error where multi links were asked
/// for and cannot be had. The logging object takes single links: its log
/// functions are global, verified once each only where the program's BTF
/// says so, which this loader does not pass (verified inline instead, its
/// start took 1.4 s where single links take 0.3 s).
pub fn chosen(mode: LinkMode, bpf_log: bool) -> Result<bool, BpfError> {
    match mode {
        LinkMode::Single => Ok(false),
        LinkMode::Auto => Ok(!bpf_log && supported().is_ok()),
        LinkMode::Multi if bpf_log => Err(BpfError::Multi(
            "--bpf-log takes single links (its log functions need the object's BTF, which the multi-link \
             loader does not pass): use --uprobe-links single or auto with it"
                .into(),
        )),
        LinkMode::Multi => supported()
            .map(|()| true)
            .map_err(|why| BpfError::Multi(format!("{why}: use --uprobe-links single or auto"))),
    }
}

/// The uprobe programs, loaded for multi links, by name.
pub struct MultiPrograms {
    fds: HashMap<&'static str, OwnedFd>,
    /// Programs verified with the others whose refusal is no failure of
    /// the load (the view program), each taken by [`Self::add`].
    later: HashMap<&'static str, Result<OwnedFd, sys::LoadError>>,
}

impl MultiPrograms {
    /// Relocates `names` and `later` in `object` against `ebpf`'s maps (one
    /// pass) and verifies them, with the object's own programs `beside`
    /// (loaded by aya), on every core at once; on error, the first failure
    /// by name (of `beside` first) among `names` and `beside`. What came
    /// of each of `later` is kept for [`Self::add`]: verified beside the
    /// rest, the view program's few milliseconds are not added to the start.
    pub fn load(
        object: &[u8],
        ebpf: &mut Ebpf,
        names: &[&'static str],
        later: &[&'static str],
        beside: &[&'static str],
    ) -> Result<Self, BpfError> {
        let all: Vec<&'static str> = names.iter().chain(later).copied().collect();
        let queue = relocate::programs(object, ebpf, &all)?;
        let mut jobs = parallel_load::object_jobs(ebpf, beside)?;
        jobs.extend(queue.into_iter().map(|(name, insns)| Job::Insns(name, insns)));
        let (loaded, later): (Vec<_>, Vec<_>) =
            parallel_load::verify(jobs, sys::load)?.into_iter().partition(|(n, _)| !later.contains(n));
        let fds = judged(loaded)?;
        Ok(Self { fds, later: later.into_iter().collect() })
    }

    /// Adds `name`, verified with the others: an error if the kernel
    /// refused it.
    pub fn add(&mut self, name: &'static str) -> Result<(), BpfError> {
        let loaded = self.later.remove(name).ok_or(BpfError::MissingProgram(name))?;
        self.fds.extend(judged(vec![(name, loaded)])?);
        Ok(())
    }

    /// Program `name`'s descriptor.
    pub fn fd(&self, name: &'static str) -> Result<&OwnedFd, BpfError> {
        self.fds.get(name).ok_or(BpfError::MissingProgram(name))
    }

    /// One link of `program` on `path` at every offset, each with its cookie.
    pub fn link(
        &self,
        program: &'static str,
        path: &Path,
        sites: &[(u64, u64)],
        ret: bool,
    ) -> Result<OwnedFd, BpfError> {
        let (offsets, cookies): (Vec<u64>, Vec<u64>) = sites.iter().copied().unzip();
        sys::link(self.fd(program)?, path, &offsets, &cookies, ret).map_err(|e| {
            BpfError::Multi(format!(
                "linking `{program}` at {} site(s) of {}: {e} (start with --uprobe-links single to use single \
                 links)",
                sites.len(),
                path.display()
            ))
        })
    }
}

/// The loaded programs by name, or the first refusal by name.
fn judged(
    mut results: Vec<(&'static str, Result<OwnedFd, sys::LoadError>)>,
) -> Result<HashMap<&'static str, OwnedFd>, BpfError> {
    results.sort_by_key(|(n, _)| *n);
    let mut fds = HashMap::new();
    for (name, loaded) in results {
        let loaded = loaded.and_then(|fd| refused_for_a_test(name).map_or(Ok(fd), Err));
        let fd = loaded.map_err(|e| {
            BpfError::Multi(format!(
                "the kernel refused `{name}` for multi-uprobe links: {} (start with --uprobe-links single to use \
                 single links); the verifier's last lines:\n{}",
                e.error, e.log
            ))
        })?;
        fds.insert(name, fd);
    }
    Ok(fds)
}

/// A testing aid: `GPUMEM_REFUSE_MULTI=<program>` in the agent's
/// environment makes the loader take that program, accepted by the kernel
/// for multi links, as refused, so that a test sees what the agent does
/// when a kernel's verifier refuses one (no kernel does on request).
fn refused_for_a_test(name: &str) -> Option<sys::LoadError> {
    let named = std::env::var_os("GPUMEM_REFUSE_MULTI").is_some_and(|n| n == name);
    named.then(|| sys::LoadError {
        error: std::io::Error::from_raw_os_error(nix::libc::EACCES),
        log: "GPUMEM_REFUSE_MULTI: refused for a test, as the verifier would".into(),
    })
}

/// Closes `links` side by side, on up to 64 threads: each waits for its
/// own grace period, and the kernel holds no lock across them.
pub fn close_all(links: Vec<OwnedFd>) {
    let threads = links.len().min(64);
    on_threads(links, threads, drop);
}

/// One multi link to make: a program, whether it is a return probe, and
/// its sites (file offset, cookie).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSites {
    pub program: &'static str,
    pub ret: bool,
    pub sites: Vec<(u64, u64)>,
}

/// A library's placed rows as multi links: per program (and whether it is
/// a return probe), its sites with their cookies, in table order.
/// `programs` (entry, return) stand in for every row's own (the floor).
pub fn group(
    placed: &[crate::bpf::placement::Placed],
    programs: Option<(&'static str, &'static str)>,
) -> Vec<LinkSites> {
    let mut out: Vec<LinkSites> = Vec::new();
    for p in placed {
        let cookie = gpumem_common::cookie::pack(p.probe.api.id, p.probe.api.kind, p.ret.unwrap_or(0));
        for (program, is_ret) in p.probe.roles(programs) {
            let site = (p.offset(), cookie);
            match out.iter_mut().find(|l| l.program == program && l.ret == is_ret) {
                Some(l) => l.sites.push(site),
                None => out.push(LinkSites { program, ret: is_ret, sites: vec![site] }),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::group;
    use crate::bpf::{
        placement::Placed,
        probes::probes,
        site::{How, Site},
    };

    fn placed() -> Vec<Placed> {
        probes()
            .enumerate()
            .map(|(i, probe)| Placed {
                probe,
                function: 0x1000 * (i as u64 + 1),
                site: Site { offset: 10, how: How::Shifted },
                ret: Some(7),
            })
            .collect()
    }

    #[test]
    fn every_row_is_one_entry_site_and_one_return_site_where_it_has_one_of_its_own_programs() {
        let rows = placed();
        let groups = group(&rows, None);
        for p in &rows {
            let cookie = gpumem_common::cookie::pack(p.probe.api.id, p.probe.api.kind, 7);
            let roles = [Some((p.probe.entry, false)), p.probe.ret.map(|r| (r, true))];
            for (program, ret) in roles.into_iter().flatten() {
                let holding: Vec<_> = groups
                    .iter()
                    .filter(|l| l.sites.contains(&(p.offset(), cookie)))
                    .map(|l| (l.program, l.ret))
                    .collect();
                assert!(holding.contains(&(program, ret)), "{} in {holding:?}", p.probe.symbol());
            }
        }
        let sites: usize = groups.iter().map(|l| l.sites.len()).sum();
        let returns = rows.iter().filter(|p| p.probe.ret.is_some()).count();
        assert!(returns < rows.len(), "frees final at their entry have no return probe");
        assert_eq!(sites, rows.len() + returns, "each row once as entry, once as return where it has one");
        let mut keys: Vec<_> = groups.iter().map(|l| (l.program, l.ret)).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), groups.len(), "one link per program and role");
    }

    #[test]
    fn the_floor_puts_every_row_on_its_programs_at_the_same_sites() {
        let rows = placed();
        let groups = group(&rows, Some(("floor_entry", "floor_return")));
        let shape: Vec<_> = groups.iter().map(|l| (l.program, l.ret, l.sites.len())).collect();
        let returns = rows.iter().filter(|p| p.probe.ret.is_some()).count();
        assert_eq!(shape, [("floor_entry", false, rows.len()), ("floor_return", true, returns)]);
    }
}
