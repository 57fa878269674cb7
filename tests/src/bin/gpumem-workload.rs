//! gpumem-workload: scripted CUDA allocation patterns against whatever
//! libcuda it is pointed at, printing its own ground truth (bytes held,
//! calls made) as JSON lines at checkpoints. With `--pause` it waits for a
//! line on stdin after each checkpoint, so a test can compare the agent's
//! numbers while the process holds still.
// It shares the test crate's dependencies with the end-to-end tests.
#![allow(unused_crate_dependencies)]
use std::{
    io::{BufRead, Write},
    sync::Arc,
};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use gpumem_tests::{
    bench_loop::{self, PoolLoop},
    driver::Driver,
    mixed::{self, METHODS},
    no_device,
    pace::Pace,
    threads::{self, Threads},
    truth::{Checkpoint, Truth},
};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Scenario {
    /// A few allocations of odd sizes, half freed, the rest leaked at exit.
    Basic,
    /// Allocate `--size` chunks until the card refuses, then free them all.
    Oom,
    /// `--threads` threads allocating and freeing at random, frees often on
    /// another thread than the allocation's; half freed, the rest leaked
    /// (`--iterations 0`: until killed, or with `--pause` a line on stdin).
    Threads,
    /// Allocate, fork; the child allocates its own memory and frees one of
    /// the parent's addresses (which it never allocated), then exits.
    Fork,
    /// Every allocation family gpumem covers, on devices 0 and 1, with the
    /// truth split by kind and device.
    Families,
    /// Frees the driver refuses beside frees it takes (failed_frees.rs).
    FailedFrees,
    /// Allocate (with `--vmm`, also a mapped VMM handle), then exec this
    /// program again as `basic` (same pid): the new image holds nothing of
    /// the old one.
    Exec,
    /// `--iterations` allocations of `--size` bytes, a checkpoint after
    /// each (`step-N`), then `done`: for limits, which stop it part way.
    Steps,
    /// `--size` at a time until the driver says CUDA_ERROR_OUT_OF_MEMORY
    /// (at most `--iterations` calls; checkpoint `step-N` after each),
    /// checkpoint `refused`; free one, `freed`; allocate one again,
    /// `again`. What a process under a deny limit sees.
    Deny,
    /// For the bench: `--iterations` alloc+free pairs of `--size` bytes in
    /// a tight loop (with `--mix`, rotating through the families; with
    /// `--ctx`, cuCtxSetCurrent calls instead), timed; prints `{"bench":
    /// .., "iterations": .., "ns_per_iteration": ..}`. With `--rate`, paced
    /// to that many pairs per second.
    Loop,
    /// `--iterations` allocations of `--size` bytes, checkpoint `held`,
    /// free them all, checkpoint `freed`: for the bench's agent memory with
    /// many live allocations (use `--pause` to hold them). With `--vmm`,
    /// each a VMM handle, mapped.
    Hold,
    /// Asks the card's size every way (devices 0, 1) and sizes itself as
    /// JAX does, 75% of the total then half the free (see view.rs).
    View,
    /// For a driver with no device (NVIDIA's library on a machine without
    /// a GPU; implies `--no-device`): cuInit, then `--iterations` rounds of
    /// cuMemAlloc_v2 through dlsym and cuMemAlloc, cuMemAllocAsync (per
    /// thread and legacy stream) through cuGetProcAddress_v2, each of
    /// `--size` bytes and each refused; prints `{"init": .., "calls":
    /// [..]}`, then checkpoint `refused`.
    NoDevice,
}

#[derive(Debug, Parser)]
#[command(
    about = "Run a scripted CUDA allocation pattern and print its ground truth",
    args_override_self = true
)]
struct Args {
    /// The driver library to dlopen.
    #[arg(long, default_value = "libcuda.so.1")]
    libcuda: String,
    #[arg(long, value_enum, default_value_t = Scenario::Basic)]
    scenario: Scenario,
    /// Wait for a line on stdin after each checkpoint.
    #[arg(long)]
    pause: bool,
    /// Device ordinal whose primary context the workload uses.
    #[arg(long, default_value_t = 0)]
    device: i32,
    #[arg(long, default_value_t = 4)]
    threads: usize,
    #[arg(long, default_value_t = 200)]
    iterations: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// `threads`: allocate through every family at random (plain, async,
    /// async per-thread, managed, VMM), not only cuMemAlloc_v2.
    #[arg(long)]
    mix: bool,
    /// After loading the driver, print a `loaded` checkpoint and wait for
    /// a line on stdin before the scenario starts.
    #[arg(long)]
    hold_at_start: bool,
    /// `loop`: pairs per second; `threads`: calls per second in all (0: flat out).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Chunk size (`oom`, `loop`, `steps`, `deny`, `hold`).
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// `loop`: time cuCtxSetCurrent calls (what a framework may call once
    /// per operation), making the current context current again.
    #[arg(long)]
    ctx: bool,
    /// `loop`: time stream-ordered pairs instead (`async`:
    /// cuMemAllocAsync, `from-pool`: cuMemAllocFromPoolAsync; each with
    /// cuMemFreeAsync).
    #[arg(long, value_enum)]
    pool: Option<PoolLoop>,
    /// `hold`: mapped VMM handles instead; `exec`: one more, before it.
    #[arg(long)]
    vmm: bool,
    /// The driver has no device (NVIDIA's library without a GPU): open
    /// none; `loop` then times cuMemAlloc_v2+cuMemFree_v2 pairs that the
    /// driver refuses, through the same entry points.
    #[arg(long)]
    no_device: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let driver = Arc::new(Driver::load(&args.libcuda)?);
    let no_device = args.no_device || matches!(args.scenario, Scenario::NoDevice);
    let ctx = if no_device {
        // As a client without a GPU: cuInit fails, then every call does.
        if !matches!(args.scenario, Scenario::NoDevice) {
            // SAFETY: cuInit's C signature.
            let _ = unsafe { (driver.init)(0) };
        }
        std::ptr::null_mut()
    } else {
        driver.open_device(args.device)?
    };
    let truth = Arc::new(Truth::default());
    let w = Workload { args: &args, driver, truth, ctx: ctx as usize };
    if args.hold_at_start {
        emit(&w.truth.checkpoint("loaded"), true)?;
    }
    match args.scenario {
        Scenario::Basic => w.basic(),
        Scenario::Oom => w.oom(),
        Scenario::Threads => w.threads(),
        Scenario::Fork => w.fork(),
        Scenario::Exec => w.exec(),
        Scenario::Steps => w.steps(),
        Scenario::Deny => w.until_refused(),
        Scenario::Loop => w.bench_loop(),
        Scenario::Hold => {
            gpumem_tests::hold::run(&w.driver, &w.truth, (args.iterations, args.size, args.vmm), &|n| {
                w.checkpoint(n)
            })
        }
        Scenario::NoDevice => w.no_device(),
        Scenario::Families => gpumem_tests::families::run(&w.driver, &w.truth, w.ctx, &|n| w.checkpoint(n)),
        Scenario::FailedFrees => gpumem_tests::failed_frees::run(&w.driver, &w.truth, &|n| w.checkpoint(n)),
        Scenario::View => gpumem_tests::view::run(&w.driver, &w.truth, w.ctx, &[1], &|n| w.checkpoint(n)),
    }
}

struct Workload<'a> {
    args: &'a Args,
    driver: Arc<Driver>,
    truth: Arc<Truth>,
    ctx: usize,
}

impl Workload<'_> {
    fn checkpoint(&self, name: &str) -> anyhow::Result<()> {
        emit(&self.truth.checkpoint(name), self.args.pause)
    }

    fn alloc(&self, bytes: usize) -> anyhow::Result<u64> {
        let p =
            self.driver.alloc(bytes).map_err(|e| anyhow::anyhow!("cuMemAlloc_v2({bytes}) returned {e}"))?;
        self.truth.allocated(bytes as u64);
        Ok(p)
    }

    fn free(&self, p: u64, bytes: usize) -> anyhow::Result<()> {
        self.driver.free(p)?;
        self.truth.freed(bytes as u64);
        Ok(())
    }

    fn basic(&self) -> anyhow::Result<()> {
        let sizes = [1 << 20, (3 << 20) + 123, 4096, 7, 65536 + 1];
        let mut held = Vec::new();
        for s in sizes {
            held.push((self.alloc(s)?, s));
        }
        self.checkpoint("allocated")?;
        for (p, s) in held.drain(..2) {
            self.free(p, s)?;
        }
        self.checkpoint("freed")?;
        Ok(()) // the rest is leaked: exit must release it
    }

    fn oom(&self) -> anyhow::Result<()> {
        let mut held = Vec::new();
        loop {
            match self.driver.alloc(self.args.size) {
                Ok(p) => {
                    self.truth.allocated(self.args.size as u64);
                    held.push(p);
                }
                Err(2) => {
                    self.truth.refused();
                    break;
                }
                Err(e) => bail!("cuMemAlloc_v2 returned {e}, expected success or CUDA_ERROR_OUT_OF_MEMORY"),
            }
            if held.len() > 1_000_000 {
                bail!("the card never filled up: is SIMCUDA_CAPACITY set?");
            }
        }
        self.checkpoint("full")?;
        for p in held {
            self.free(p, self.args.size)?;
        }
        self.checkpoint("empty")
    }

    fn threads(&self) -> anyhow::Result<()> {
        let a = self.args;
        let spec = Threads {
            threads: a.threads,
            iterations: a.iterations,
            until: (a.iterations == 0 && a.pause).then(threads::stop_on_line),
            rate: a.rate,
            device: a.device,
            mix: a.mix,
            seed: a.seed,
        };
        let mut pool = spec.run(&self.driver, &self.truth, self.ctx)?;
        self.checkpoint("mixed")?;
        let half = pool.len() / 2;
        pool.drain(..half).try_for_each(|h| mixed::free(&self.driver, &self.truth, h, true))?;
        self.checkpoint("drained")
    }

    fn bench_loop(&self) -> anyhow::Result<()> {
        let (n, size) = (self.args.iterations.max(1), self.args.size);
        let start = std::time::Instant::now();
        if let Some(which) = self.args.pool {
            bench_loop::pool(&self.driver, which, n, size, self.args.device, self.args.no_device)?;
        } else if self.args.ctx {
            bench_loop::ctx_set_current(&self.driver, self.ctx, n, self.args.no_device)?;
        } else if self.args.mix {
            // Symbols are looked up per call here (the same in every
            // configuration compared).
            for i in 0..n {
                let h = mixed::alloc(
                    &self.driver,
                    &self.truth,
                    METHODS[i % METHODS.len()],
                    size as u64,
                    self.args.device,
                )?;
                mixed::free(&self.driver, &self.truth, h, true)?;
            }
        } else {
            let mut pace = Pace::new(self.args.rate, 1);
            for _ in 0..n {
                pace.next();
                if self.args.no_device {
                    // Both refused (raw: an error value costs more).
                    let _ = self.driver.alloc(size);
                    // SAFETY: cuMemFree_v2's C signature.
                    let _ = unsafe { (self.driver.mem_free)(0) };
                    continue;
                }
                let p = self.driver.alloc(size).map_err(|e| anyhow::anyhow!("cuMemAlloc_v2 returned {e}"))?;
                self.driver.free(p)?;
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / n as f64;
        let name = match (self.args.pool, self.args.ctx, self.args.mix) {
            (Some(which), ..) => which.name(),
            (None, true, _) => "ctx_set_current",
            (None, false, true) => "mixed",
            (None, false, false) => "alloc_free",
        };
        println!("{}", serde_json::json!({ "bench": name, "iterations": n, "ns_per_iteration": ns }));
        Ok(())
    }

    fn no_device(&self) -> anyhow::Result<()> {
        let made = no_device::run(&self.driver, &self.truth, self.args.iterations, self.args.size as u64)?;
        println!("{}", serde_json::to_string(&made)?);
        self.checkpoint("refused")
    }

    fn steps(&self) -> anyhow::Result<()> {
        for i in 1..=self.args.iterations {
            self.alloc(self.args.size)?;
            self.checkpoint(&format!("step-{i}"))?;
        }
        self.checkpoint("done")
    }

    fn until_refused(&self) -> anyhow::Result<()> {
        let size = self.args.size;
        let mut held = Vec::new();
        loop {
            if held.len() >= self.args.iterations {
                bail!("{} allocations of {size} bytes were never refused", held.len());
            }
            match self.driver.alloc(size) {
                Ok(p) => {
                    self.truth.allocated(size as u64);
                    held.push(p);
                    self.checkpoint(&format!("step-{}", held.len()))?;
                }
                Err(2) => break,
                Err(e) => bail!("cuMemAlloc_v2 returned {e}, expected success or CUDA_ERROR_OUT_OF_MEMORY"),
            }
        }
        self.truth.refused();
        self.checkpoint("refused")?;
        let p = held.pop().expect("the first allocation fits under any limit the test sets");
        self.free(p, size)?;
        self.checkpoint("freed")?;
        held.push(self.alloc(size)?);
        self.checkpoint("again")
    }

    fn exec(&self) -> anyhow::Result<()> {
        self.alloc(3 << 20)?;
        if self.args.vmm {
            gpumem_tests::hold::create_mapped(&self.driver, 2 << 20)?;
            self.truth.allocated_as("vmm", 0, 2 << 20);
        }
        self.checkpoint("before-exec")?;
        let mut cmd = std::process::Command::new(std::env::current_exe()?);
        cmd.args(["--libcuda", &self.args.libcuda, "--scenario", "basic"]);
        if self.args.pause {
            cmd.arg("--pause");
        }
        use std::os::unix::process::CommandExt;
        Err(cmd.exec()).context("exec")
    }

    fn fork(&self) -> anyhow::Result<()> {
        let parent_alloc = self.alloc(5 << 20)?;
        std::io::stdout().flush()?;
        // SAFETY: single-threaded at this point; the child only calls the
        // driver and exits.
        match unsafe { libc::fork() } {
            -1 => bail!("fork: {}", std::io::Error::last_os_error()),
            0 => {
                let child = Truth::default();
                let _held = self.driver.alloc(2 << 20).map_err(|e| anyhow::anyhow!("child alloc: {e}"))?;
                child.allocated(2 << 20);
                // The parent's address: the driver state was copied by fork,
                // but this process never allocated it. gpumem must not
                // uncharge the parent for it.
                let _ = self.driver.free(parent_alloc);
                emit(&child.checkpoint("child"), false)?;
                std::process::exit(0);
            }
            pid => {
                let mut status = 0;
                // SAFETY: waiting for our own child.
                if unsafe { libc::waitpid(pid, &mut status, 0) } != pid || status != 0 {
                    bail!("fork child {pid} failed (status {status})");
                }
                self.checkpoint("parent")
            }
        }
    }
}

fn emit(c: &Checkpoint, pause: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, c)?;
    out.write_all(b"\n")?;
    out.flush()?;
    drop(out);
    if pause {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).context("waiting on stdin")?;
    }
    Ok(())
}
