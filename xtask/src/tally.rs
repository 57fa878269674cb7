//! Counting libtest's results across runs (host and kernel matrix) into
//! the one `N passed, N failed` line `cargo xtask test` ends with.

/// Totals over every libtest run.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Tally {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    pub skipped: u64,
    pub runs: u64,
}

impl Tally {
    /// Counts one line of libtest output.
    pub fn line(&mut self, line: &str) {
        // libtest prints `test NAME ... ` before the test runs, so a skip
        // notice lands on that line.
        if line.starts_with("SKIPPED ") || line.contains(" ... SKIPPED ") {
            self.skipped += 1;
        }
        let Some(rest) = line.strip_prefix("test result: ") else {
            return;
        };
        self.runs += 1;
        for part in rest.split([';', '.']) {
            let mut words = part.split_whitespace();
            let (Some(n), Some(what)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match what {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_libtest_summaries_and_skips() {
        let mut t = Tally::default();
        t.line(
            "test result: ok. 22 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s",
        );
        t.line(
            "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s",
        );
        t.line("SKIPPED some_test: needs root");
        t.line("test other_test ... SKIPPED other_test: needs a kernel that allows it");
        t.line("test foo ... ok");
        assert_eq!(t, Tally { passed: 25, failed: 2, ignored: 1, skipped: 2, runs: 2 });
    }
}
