//! A real container runtime for the container test: Debian's podman (with
//! runc: this host's crun refuses hybrid cgroups), running the workload
//! from a root filesystem directory (`--rootfs`, no image registry). All
//! of podman's state (storage, run files, network configuration) lives in
//! the test's scratch directory, so nothing global is touched; `cargo
//! xtask test` installs podman and names it in `GPUMEM_PODMAN`.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use super::{
    env::{paths, provided, scratch},
    poll::poll,
    workload::Workload,
};

/// podman with a private state directory (removed when dropped, after
/// the containers).
pub struct Podman {
    pub(super) cli: Cli,
    _state: tempfile::TempDir,
}

/// How to call podman with that state.
#[derive(Clone)]
pub(super) struct Cli {
    bin: PathBuf,
    pub(super) state: PathBuf,
}

/// A container made by [`Podman::run`], removed (killed first) when
/// dropped.
pub struct Container {
    pub name: String,
    cli: Cli,
}

impl Podman {
    /// podman as `cargo xtask test` installed it, or None (the test is
    /// skipped, saying why).
    pub fn available() -> Option<Self> {
        let bin = PathBuf::from(provided("GPUMEM_PODMAN", "installs podman and runc and sets it")?);
        let state = scratch();
        Some(Self { cli: Cli { bin, state: state.path().to_path_buf() }, _state: state })
    }

    /// A root filesystem holding the workload and what it links, and its
    /// own copy of the simulated driver (another inode, as an image's
    /// copy is) when `own_libcuda`.
    pub fn rootfs(&self, name: &str, own_libcuda: bool) -> PathBuf {
        let p = paths();
        let dir = self.cli.state.join(format!("rootfs-{name}"));
        for d in ["proc", "sys", "dev", "etc", "tmp", "usr/lib"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        place(&p.workload, &dir.join("gpumem-workload"));
        for lib in linked(&p.workload) {
            place(&lib, &dir.join(lib.strip_prefix("/").unwrap()));
        }
        if own_libcuda {
            std::fs::copy(&p.libcuda, dir.join("usr/lib/libcuda.so.1")).unwrap();
        }
        dir
    }

    /// Runs `gpumem-workload ARGS` in container `name` from `rootfs`,
    /// with the host's simulated driver bind-mounted when `host_libcuda`:
    /// the workload (through `podman run -i`) and the container.
    pub fn run(&self, name: &str, rootfs: &Path, host_libcuda: bool, args: &[&str]) -> (Workload, Container) {
        self.run_with(name, rootfs, (host_libcuda, &[]), args)
    }

    /// [`Self::run`] with `env` in the container's environment (`-e`).
    pub fn run_with(
        &self,
        name: &str,
        rootfs: &Path,
        (host_libcuda, env): (bool, &[(&str, &str)]),
        args: &[&str],
    ) -> (Workload, Container) {
        let mut c = self.cli.command();
        c.args(["run", "--rm", "-i", "--network", "none", "--name", name]).args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=4096:4096",
        ]);
        if host_libcuda {
            c.arg("-v").arg(format!("{}:/usr/lib/libcuda.so.1:ro", paths().libcuda.display()));
        }
        for (k, v) in env {
            c.arg("-e").arg(format!("{k}={v}"));
        }
        // `--rootfs` takes no value: the directory stands where an image
        // would, and everything after it is the command.
        c.arg("--rootfs").arg(rootfs).args(["/gpumem-workload", "--libcuda", "/usr/lib/libcuda.so.1"]);
        c.args(args);
        let workload = Workload::from_command(c, None);
        (workload, Container { name: name.to_string(), cli: self.cli.clone() })
    }
}

impl Cli {
    /// podman with this test's state and the options this host needs:
    /// runc (crun 1.8 refuses hybrid cgroups), the vfs driver (overlay
    /// leaves a mount between commands), no event log, its network
    /// configuration kept here too.
    pub(super) fn command(&self) -> Command {
        let s = &self.state;
        let mut c = Command::new(&self.bin);
        c.args(["--runtime", "runc", "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs"])
            .args(["--events-backend", "none"])
            .arg("--root")
            .arg(s.join("root"))
            .arg("--runroot")
            .arg(s.join("runroot"))
            .arg("--tmpdir")
            .arg(s.join("tmp"))
            .arg("--network-config-dir")
            .arg(s.join("net"));
        c
    }
}

impl Container {
    /// Runs `gpumem-workload ARGS` in the running container with `podman
    /// exec` (a shell opened into it would be the same: a process of the
    /// container's cgroup, with none of its environment's variables but
    /// what `env` gives).
    pub fn exec(&self, env: &[(&str, &str)], args: &[&str]) -> Workload {
        let mut c = self.cli.command();
        c.args(["exec", "-i"]);
        for (k, v) in env {
            c.arg("-e").arg(format!("{k}={v}"));
        }
        c.arg(&self.name).args(["/gpumem-workload", "--libcuda", "/usr/lib/libcuda.so.1"]).args(args);
        Workload::from_command(c, None)
    }

    /// The container's process as the host sees it, and the container's id.
    pub fn host_pid_and_id(&self) -> (u32, String) {
        let mut c = self.cli.command();
        c.args(["inspect", "--format", "{{.State.Pid}} {{.Id}}", &self.name]);
        let out = poll(
            "podman inspect to name the container's process",
            || c.output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()),
            |o| o.as_deref().is_some_and(|o| !o.is_empty() && !o.starts_with("0 ")),
            || format!("container {}", self.name),
        )
        .unwrap();
        let (pid, id) = out.split_once(' ').unwrap();
        (pid.parse().unwrap(), id.to_string())
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // The workload is the container's pid 1, which ignores SIGTERM:
        // no grace period.
        let _ = self.cli.command().args(["rm", "-f", "-t", "0", &self.name]).output();
    }
}

/// `from` (the file a link names) at `to`: a hard link where both are on
/// one file system, else a copy (only libcuda's copy must be a file of its own).
fn place(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    // The loader's name is a link (/lib64/ld-linux-x86-64.so.2): place
    // the file itself.
    let from = &std::fs::canonicalize(from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to)
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", from.display(), to.display()));
    }
}

/// The shared libraries `binary` links, with the dynamic loader, as ldd
/// lists them.
fn linked(binary: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(binary).output().expect("running ldd");
    assert!(out.status.success(), "ldd {}: {}", binary.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')))
        .map(PathBuf::from)
        .collect()
}
