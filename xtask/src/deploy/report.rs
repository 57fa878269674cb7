//! The deployment checks' results, printed as libtest prints a test run:
//! one `test deploy::NAME ... ok` / `... FAILED` line per check, each
//! failure's reason, then a `test result:` line that the tally counts.
use std::time::Instant;

use crate::tally::Tally;

pub struct Report {
    started: Instant,
    passed: u64,
    failures: Vec<(String, String)>,
}

impl Report {
    pub fn new() -> Self {
        Self { started: Instant::now(), passed: 0, failures: Vec::new() }
    }

    /// Runs one check and prints its line; an error is a failure, said
    /// with its causes at the end.
    pub fn check(&mut self, name: &str, f: impl FnOnce() -> anyhow::Result<()>) {
        let name = format!("deploy::{name}");
        match f() {
            Ok(()) => {
                println!("test {name} ... ok");
                self.passed += 1;
            }
            Err(e) => {
                println!("test {name} ... FAILED");
                self.failures.push((name, format!("{e:#}")));
            }
        }
    }

    /// Prints the failures and the summary line (counted by `tally`);
    /// true when every check passed.
    pub fn finish(self, tally: &mut Tally) -> bool {
        if !self.failures.is_empty() {
            println!("\nfailures:\n");
            for (name, why) in &self.failures {
                println!("---- {name} ----\n{why}\n");
            }
        }
        let outcome = if self.failures.is_empty() { "ok" } else { "FAILED" };
        let summary = format!(
            "test result: {outcome}. {} passed; {} failed; 0 ignored; 0 measured; 0 filtered out; finished in {:.2}s",
            self.passed,
            self.failures.len(),
            self.started.elapsed().as_secs_f64()
        );
        println!("\n{summary}\n");
        tally.line(&summary);
        self.failures.is_empty()
    }
}
