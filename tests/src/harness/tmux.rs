//! A real terminal for `gpumem top`: tmux on a server of the test's own
//! (its own socket name), a session of a fixed size, keys sent as a person
//! types them and the screen read back as text. `cargo xtask test`
//! installs tmux and names it in `GPUMEM_TMUX`.
use std::{
    path::PathBuf,
    process::{Command, Output},
};

use super::{env::provided, poll::poll};

/// A tmux server running one program in a session of a fixed size; the
/// server is killed when dropped.
pub struct Tmux {
    bin: PathBuf,
    server: String,
}

impl Tmux {
    /// tmux as `cargo xtask test` installed it, or None (the test is
    /// skipped, saying why).
    pub fn available() -> Option<Self> {
        let bin = PathBuf::from(provided("GPUMEM_TMUX", "installs tmux and sets it")?);
        Some(Self { bin, server: format!("gpumem-test-{}", std::process::id()) })
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(["-L", &self.server])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running tmux {args:?}: {e}"))
    }

    /// Starts `command` (one shell word each) in a `columns` x `rows`
    /// terminal.
    pub fn start(&self, columns: u16, rows: u16, command: &[&str]) {
        let (x, y) = (columns.to_string(), rows.to_string());
        let mut args = vec!["new-session", "-d", "-s", "main", "-x", &x, "-y", &y, "--"];
        args.extend_from_slice(command);
        let out = self.tmux(&args);
        assert!(out.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// The screen as it shows now, a line per row.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "main"]).stdout).into_owned()
    }

    /// Waits until the screen satisfies `cond`, and returns it.
    pub fn wait_for_screen(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        poll(what, || self.screen(), |s| cond(s), || "(the last screen is above)".into())
    }

    /// Presses keys by tmux's names (`Enter`, `Escape`, `q`).
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "main"];
        args.extend_from_slice(keys);
        assert!(self.tmux(&args).status.success(), "tmux send-keys {keys:?}");
    }

    /// Types `text` as it is.
    pub fn type_text(&self, text: &str) {
        assert!(self.tmux(&["send-keys", "-t", "main", "-l", text]).status.success(), "typing {text}");
    }

    /// Whether the program still runs (its session ends with it).
    pub fn running(&self) -> bool {
        self.tmux(&["has-session", "-t", "main"]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}
