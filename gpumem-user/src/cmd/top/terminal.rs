//! The terminal while `gpumem top` runs: raw mode, the alternate screen,
//! the cursor hidden; all undone when the view ends, by error, or by
//! panic.
use std::{
    io::{self, IsTerminal, Stdout},
    sync::Once,
};

use crossterm::{
    cursor::{Hide, Show},
    execute,
    terminal::{disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen},
};
use ratatui::{backend::CrosstermBackend, Terminal};

/// Why the view cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ScreenError {
    #[error(
        "gpumem top draws a live view and needs a terminal, but its output is not one: run it in a \
         terminal (over ssh, `ssh -t`), or use `gpumem status` (`--json` for scripts)"
    )]
    NotATerminal,
    #[error("cannot set up the terminal")]
    Setup(#[source] io::Error),
}

/// The terminal in the view's modes, restored when dropped.
pub struct Screen {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Screen {
    /// Takes over the terminal (an error, changing nothing, where standard
    /// output is not one).
    pub fn enter() -> Result<Self, ScreenError> {
        if !io::stdout().is_terminal() {
            return Err(ScreenError::NotATerminal);
        }
        restore_on_panic();
        let setup = || -> io::Result<Terminal<CrosstermBackend<Stdout>>> {
            enable_raw_mode()?;
            execute!(io::stdout(), EnterAlternateScreen, Hide)?;
            Terminal::new(CrosstermBackend::new(io::stdout()))
        };
        match setup() {
            Ok(terminal) => Ok(Self { terminal }),
            Err(e) => {
                restore();
                Err(ScreenError::Setup(e))
            }
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Back to the terminal as it was; best effort (nothing more can be done
/// where the terminal refuses).
fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(io::stdout(), LeaveAlternateScreen, Show);
}

/// A panic restores the terminal before its message is printed (else the
/// message would land on the alternate screen, in raw mode).
fn restore_on_panic() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}
