//! A bpffs directory of the test's own for `gpumem run --persist`, and the
//! `gpumem detach` that empties it. Whatever a failed test left pinned is
//! removed when the guard drops, so no probe outlives the test.
use std::{path::PathBuf, process::Output};

use super::env::{paths, test_name};

pub struct PinDir {
    pub dir: PathBuf,
}

impl PinDir {
    /// `/sys/fs/bpf/gpumem-test-<name>`, emptied of an earlier run's pins.
    pub fn new(name: &str) -> Self {
        let dir = PathBuf::from(format!("/sys/fs/bpf/gpumem-test-{name}"));
        let _ = gpumem::bpf::persist::remove(&dir);
        Self { dir }
    }

    pub fn arg(&self) -> &str {
        self.dir.to_str().expect("a UTF-8 pin directory")
    }

    /// `gpumem run` arguments that persist here.
    pub fn run_args(&self) -> [&str; 3] {
        ["--persist", "--pin-dir", self.arg()]
    }

    /// The builds with pins here (their directories' names).
    pub fn builds(&self) -> Vec<String> {
        let dirs = std::fs::read_dir(&self.dir).into_iter().flatten().flatten();
        dirs.map(|e| e.file_name().to_string_lossy().into_owned()).collect()
    }

    /// How many handover marks (`HANDOVER_MARKS`, pinned by `build`) the
    /// threads of process `tgid` left.
    pub fn marks_of(&self, build: &str, tgid: u32) -> usize {
        use aya::maps::{HashMap, Map, MapData};
        let pin = self.dir.join(build).join("maps").join("HANDOVER_MARKS");
        let data = MapData::from_pin(&pin).unwrap_or_else(|e| panic!("opening {}: {e}", pin.display()));
        let marks: HashMap<MapData, u64, u64> =
            HashMap::try_from(Map::HashMap(data)).expect("HANDOVER_MARKS is a hash map of u64");
        marks.keys().flatten().filter(|thread| (thread >> 32) as u32 == tgid).count()
    }

    /// How many runs of `build`'s raw tracepoint program `program` (pinned
    /// under `tracepoints/`) the kernel has skipped (`recursion_misses` in
    /// the program's fdinfo: from 7.0 a preempted run makes the kernel skip
    /// the same program on its CPU meanwhile).
    pub fn skipped_runs(&self, build: &str, program: &str) -> u64 {
        use aya::programs::{links::PinnedLink, loaded_programs};
        let pin = self.dir.join(build).join("tracepoints").join(program);
        let link = PinnedLink::from_pin(&pin).unwrap_or_else(|e| panic!("opening {}: {e}", pin.display()));
        let id = aya::programs::links::FdLink::from(link).info().expect("the link's info").program_id();
        let info = loaded_programs().flatten().find(|p| p.id() == id).expect("the linked program");
        let fd = info.fd().expect("the linked program's fd");
        // gpumem needs 5.15 or newer, whose fdinfo has the count.
        gpumem::bpf::skipped::SkippedRuns::of(fd)
            .now()
            .expect("recursion_misses in the linked program's fdinfo")
    }

    /// Runs `gpumem detach` on this directory.
    pub fn detach(&self) -> Output {
        let socket = format!("/tmp/gpumem-{}-no-agent.sock", test_name());
        std::process::Command::new(paths().agent)
            .args(["detach", "--pin-dir", self.arg(), "--socket", &socket])
            .output()
            .expect("running gpumem detach")
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        if let Err(e) = gpumem::bpf::persist::remove(&self.dir) {
            eprintln!("removing the test's pins at {}: {e}", self.dir.display());
        }
    }
}
