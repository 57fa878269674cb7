//! The calls in flight when a takeover's new build has attached all its
//! programs, which the old build's return programs must stay for.
//!
//! From 6.13 the kernel runs a perf-link uretprobe (a single link:
//! `--uprobe-links single`, `--bpf-log`) only for calls that entered after
//! it was attached (a "session" consumer: `handle_uretprobe_chain` skips
//! one missing from the call's return instance). A call that entered
//! while only the old build's programs were attached returns through the
//! old build's return program alone (the handover's `leaving` lets it
//! run), so the old build's links must not go before it has returned:
//! gone, neither build's return program runs and the allocation is never
//! counted. A multi-uprobe return link has no entry handler, and the
//! kernel runs it at every return, so a takeover by one waits for nothing.
//!
//! Where each call is kept (`TASK_CALLS` by thread, `PENDING` by thread
//! and API, see the eBPF crate's account/pending.rs) is read once when the
//! new build runs ([`InFlight::find`]), and again until each call found
//! armed there has returned: its slot disarmed, or holding another call,
//! or its thread gone. A thread that calls the same API with the same
//! arguments back to back can look held when it is not; it is let go the
//! first time it is seen between two calls, and at worst when the wait
//! ends.
use std::{
    fmt::Write as _,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
    time::Instant,
};

use aya::{
    maps::{HashMap, MapData},
    Ebpf,
};
use gpumem_common::{map_name, Pending, PendingKey, TaskCall, CALL_STATE_WORDS};

use super::{batch, multi, takeover::Takeover};

/// Handles of their own on the maps that keep calls in flight (the agent
/// takes `PENDING` out of the object before a takeover completes).
pub struct CallMaps {
    pending: HashMap<MapData, PendingKey, Pending>,
    /// None where the object has no task storage map.
    task_calls: Option<MapData>,
}

impl CallMaps {
    /// The handles a takeover (`taking_over`) waits with where this
    /// build's return probes are single links (not `multi_links`); None
    /// elsewhere, or where they cannot be had (said).
    pub fn for_takeover(ebpf: &Ebpf, taking_over: bool, multi_links: bool) -> Option<Self> {
        if !taking_over || multi_links {
            return None;
        }
        Self::of(ebpf)
            .map_err(|why| {
                tracing::warn!(
                    "the takeover will not wait for calls in flight (one that entered before this build's \
                     return probes and returns after the old build's are gone goes uncounted): {why}"
                )
            })
            .ok()
    }

    /// Handles on `ebpf`'s maps; None where one cannot be had (said why).
    pub fn of(ebpf: &Ebpf) -> Result<Self, String> {
        let own = |name: &str| -> Result<MapData, String> {
            let map = ebpf.map(name).ok_or_else(|| format!("the object has no map {name}"))?;
            let fd = multi::map_data(map).fd().as_fd().try_clone_to_owned();
            let fd = fd.map_err(|e| format!("a handle on {name}: {e}"))?;
            MapData::from_fd(fd).map_err(|e| format!("a handle on {name}: {e}"))
        };
        let pending = own(map_name::PENDING)?;
        let pending = HashMap::try_from(aya::maps::Map::HashMap(pending))
            .map_err(|e| format!("{}: {e}", map_name::PENDING))?;
        Ok(Self { pending, task_calls: own("TASK_CALLS").ok() })
    }
}

/// A takeover whose new build runs, waiting for calls in flight before
/// the old build's pins go (`handover.rs`).
pub struct StandingDown {
    pub from: Takeover,
    pub maps: CallMaps,
    pub calls: InFlight,
    /// How many calls were in flight when the new build began to run.
    pub found: usize,
    pub since: Instant,
}

/// A call armed in a thread's task storage when it was first read.
struct Slot {
    tgid: u32,
    tid: u32,
    pidfd: OwnedFd,
    seen: Kept,
}

/// What identifies one call: its API (task storage keeps one call of any
/// API) and everything it kept at its entry.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Kept {
    api: u32,
    words: [u64; CALL_STATE_WORDS],
}

/// The calls still in flight of those armed when [`InFlight::find`] read.
#[derive(Default)]
pub struct InFlight {
    slots: Vec<Slot>,
    pending: Vec<(PendingKey, Kept)>,
}

impl InFlight {
    /// Every call armed now, in `PENDING` and in each thread's task
    /// storage (where the kernel opens a thread's pidfd, 6.9+: one that
    /// cannot is older than the kernels that skip a return, 6.13).
    pub fn find(maps: &CallMaps) -> Self {
        let mut found = Self::default();
        batch::for_each(&maps.pending, |k, v| {
            if v.armed == 1 {
                found.pending.push((k, kept_pending(&k, &v)));
            }
        });
        if let Some(task_calls) = &maps.task_calls {
            found.slots = armed_slots(task_calls);
        }
        found
    }

    /// Forgets the calls that have returned since; how many are left.
    pub fn settle(&mut self, maps: &CallMaps) -> usize {
        self.pending.retain(|(k, seen)| {
            maps.pending.get(k, 0).is_ok_and(|v| v.armed == 1 && kept_pending(k, &v) == *seen)
        });
        if let Some(task_calls) = &maps.task_calls {
            self.slots.retain(|s| slot(task_calls, &s.pidfd).is_some_and(|now| now == s.seen));
        } else {
            self.slots.clear();
        }
        self.len()
    }

    pub fn len(&self) -> usize {
        self.slots.len() + self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The threads still inside a call (at most 8 named), for a warning.
    pub fn describe(&self) -> String {
        let threads = self
            .slots
            .iter()
            .map(|s| (s.tgid, s.tid))
            .chain(self.pending.iter().map(|(k, _)| ((k.pid_tgid >> 32) as u32, k.pid_tgid as u32)));
        let mut out = String::new();
        for (i, (tgid, tid)) in threads.enumerate() {
            if i == 8 {
                let _ = write!(out, " and {} more", self.len() - 8);
                break;
            }
            let _ = write!(out, "{}thread {tid} of process {tgid}", if i == 0 { "" } else { ", " });
        }
        out
    }
}

fn kept_pending(k: &PendingKey, v: &Pending) -> Kept {
    // SAFETY: every variant of the union is plain words; `raw` covers it.
    Kept { api: k.api, words: unsafe { v.call.raw } }
}

/// The call armed in the task storage of each thread on the host.
fn armed_slots(task_calls: &MapData) -> Vec<Slot> {
    let mut slots = Vec::new();
    for (tgid, tid) in threads() {
        let pidfd = match pidfd_thread(tid) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => {
                tracing::debug!("calls in flight: this kernel opens no thread's pidfd ({e}): none read");
                return Vec::new();
            }
            Err(_) => continue, // gone meanwhile
        };
        if let Some(seen) = slot(task_calls, &pidfd) {
            slots.push(Slot { tgid, tid, pidfd, seen });
        }
    }
    slots
}

/// The call armed in the task storage of the thread `pidfd` names.
fn slot(task_calls: &MapData, pidfd: &OwnedFd) -> Option<Kept> {
    let key: i32 = pidfd.as_raw_fd();
    let mut value = std::mem::MaybeUninit::<TaskCall>::zeroed();
    // SAFETY: the key is an i32 (a pidfd) and the value a TaskCall, the
    // map's sizes (the object declares them so); both outlive the call.
    unsafe {
        multi::lookup(task_calls.fd().as_fd(), (&key as *const i32).cast(), value.as_mut_ptr().cast())
            .ok()?;
    }
    // SAFETY: zeroed, then written whole by the kernel.
    let t = unsafe { value.assume_init() };
    // SAFETY: as in `kept_pending`.
    (t.armed == 1).then_some(Kept { api: t.api, words: unsafe { t.call.raw } })
}

/// A pidfd of thread `tid` (`PIDFD_THREAD`, 6.9+).
fn pidfd_thread(tid: u32) -> std::io::Result<OwnedFd> {
    // PIDFD_THREAD is O_EXCL (include/uapi/linux/pidfd.h).
    // SAFETY: pidfd_open takes a pid and flags and returns a descriptor.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, tid as i32, nix::libc::O_EXCL) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Every thread on the host: (process, thread).
fn threads() -> Vec<(u32, u32)> {
    let numbers = |dir: &str| -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        entries.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
    };
    numbers("/proc")
        .into_iter()
        .flat_map(|tgid| numbers(&format!("/proc/{tgid}/task")).into_iter().map(move |tid| (tgid, tid)))
        .collect()
}
