//! The `threads` scenario's concurrent part: threads allocating and
//! freeing at random from one shared pool, so that frees often come from
//! another thread than the allocation's.
use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc, Condvar, Mutex,
};

use crate::{
    driver::Driver,
    mixed::{self, Held, Method, METHODS},
    pace::Pace,
    truth::Truth,
};

/// Allocations a process running until killed holds at most.
pub const FOREVER_HELD: usize = 64;

/// How the threads run.
pub struct Threads {
    pub threads: usize,
    /// Calls per thread; 0: until [`Self::until`] is set, or the process
    /// is killed (then about [`FOREVER_HELD`] allocations held, each under
    /// 64 KiB, so that the card does not fill; the VMM address window,
    /// never given back, lasts some millions of calls).
    pub iterations: usize,
    /// With `iterations` 0: the threads stop once this is set (see
    /// [`stop_on_line`]); None: they run until the process is killed.
    pub until: Option<Arc<AtomicBool>>,
    /// Calls per second across the threads, each pacing its share; 0: as
    /// fast as they can.
    pub rate: u64,
    pub device: i32,
    /// Allocate through every family at random, not only cuMemAlloc_v2.
    pub mix: bool,
    pub seed: u64,
}

impl Threads {
    /// Runs the threads with `ctx` current on each; returns what they left
    /// allocated.
    ///
    /// The threads end together: each, its calls made (or failed), waits
    /// until every other has made its own before it exits, so that no
    /// thread's exit (what the kernel keeps for the thread goes with it)
    /// comes before another thread's last call, however the scheduler ran
    /// them (on a loaded host one thread may make all its calls before the
    /// next is first run).
    pub fn run(&self, driver: &Arc<Driver>, truth: &Arc<Truth>, ctx: usize) -> anyhow::Result<Vec<Held>> {
        let pool: Arc<Mutex<Vec<Held>>> = Arc::default();
        let finished = Arc::new(Finished::new(self.threads));
        let handles: Vec<_> = (0..self.threads)
            .map(|t| {
                let (driver, truth, pool) = (driver.clone(), truth.clone(), pool.clone());
                let finished = finished.clone();
                let (iterations, device, mix) = (self.iterations, self.device, self.mix);
                let until = self.until.clone();
                let going = move || until.as_ref().is_none_or(|u| !u.load(Ordering::Relaxed));
                let mut pace = Pace::new(self.rate, self.threads);
                let mut rng = Rng(self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (t as u64 + 1));
                std::thread::spawn(move || -> anyhow::Result<()> {
                    // Dropped at the thread's end, whatever its result.
                    let _end = Arrival(finished);
                    driver.set_current(ctx)?;
                    let forever = iterations == 0;
                    for _ in (0..iterations).chain((0..).take_while(|_| forever && going())) {
                        pace.next();
                        // Frees often take another thread's allocation.
                        let take = {
                            let mut pool = pool.lock().unwrap();
                            let free = rng.below(10) < 4 || (forever && pool.len() >= FOREVER_HELD);
                            if free && !pool.is_empty() {
                                let i = rng.below(pool.len() as u64) as usize;
                                Some(pool.swap_remove(i))
                            } else {
                                None
                            }
                        };
                        match take {
                            Some(h) => mixed::free(&driver, &truth, h, rng.below(2) == 0)?,
                            None => {
                                let method = if mix {
                                    METHODS[rng.below(METHODS.len() as u64) as usize]
                                } else {
                                    Method::Plain
                                };
                                let size = 1 + rng.below(if forever { 64 << 10 } else { 4 << 20 });
                                // A deny limit's refusal is the driver's
                                // out of memory: counted, and the thread
                                // goes on.
                                match mixed::alloc(&driver, &truth, method, size, device) {
                                    Ok(h) => pool.lock().unwrap().push(h),
                                    Err(e) if mixed::refused(&e) => truth.refused(),
                                    Err(e) => return Err(e),
                                }
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("a workload thread panicked"))??;
        }
        let left = std::mem::take(&mut *pool.lock().unwrap());
        Ok(left)
    }
}

/// How many of a run's threads have finished their calls, for each to
/// wait on the others (see [`Threads::run`]).
struct Finished {
    threads: usize,
    count: Mutex<usize>,
    all: Condvar,
}

impl Finished {
    fn new(threads: usize) -> Self {
        Self { threads, count: Mutex::new(0), all: Condvar::new() }
    }

    /// This thread has finished: waits until every thread has.
    fn arrive_and_wait(&self) {
        // Nothing panics holding the lock; a poisoned one is used as is.
        let mut count = self.count.lock().unwrap_or_else(|e| e.into_inner());
        *count += 1;
        self.all.notify_all();
        while *count < self.threads {
            count = self.all.wait(count).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A thread's arrival at its end, at its drop: on every path out of the
/// thread, a failure's or a panic's too, so that no thread is left waiting.
struct Arrival(Arc<Finished>);

impl Drop for Arrival {
    fn drop(&mut self) {
        self.0.arrive_and_wait();
    }
}

/// A flag set when a line arrives on standard input (or it closes): how
/// `--iterations 0 --pause` is told to stop its threads and checkpoint.
pub fn stop_on_line() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let set = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_line(&mut String::new());
        set.store(true, Ordering::Relaxed);
    });
    stop
}

/// xorshift64*: reproducible from a seed, no dependency.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value; 0 is moved off the fixed point).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
