//! Keys to actions. While a filter is typed, letters are text; otherwise
//! they are commands. Esc steps back: out of typing, then out of an
//! applied filter, then out of top.
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// What a key asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    /// The next sort order.
    Sort,
    /// Start typing a filter.
    StartFilter,
    /// A character of the filter being typed.
    Type(char),
    /// Remove the filter's last character.
    Erase,
    /// Use the filter typed.
    ApplyFilter,
    /// Stop typing, keeping the filter applied before.
    CancelTyping,
    /// Show everything.
    ClearFilter,
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
}

/// The action of `key` while a filter is being typed (`typing`) or
/// applied (`filtered`); None for keys that do nothing (and key releases).
pub fn action(key: KeyEvent, typing: bool, filtered: bool) -> Option<Action> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && matches!(key.code, KeyCode::Char('c' | 'C')) {
        return Some(Action::Quit);
    }
    if let Some(a) = movement(key.code) {
        return Some(a);
    }
    if typing {
        return match key.code {
            KeyCode::Enter => Some(Action::ApplyFilter),
            KeyCode::Esc => Some(Action::CancelTyping),
            KeyCode::Backspace => Some(Action::Erase),
            KeyCode::Char(c) if !ctrl && !c.is_control() => Some(Action::Type(c)),
            _ => None,
        };
    }
    match key.code {
        KeyCode::Esc if filtered => Some(Action::ClearFilter),
        KeyCode::Char('q' | 'Q') | KeyCode::Esc => Some(Action::Quit),
        KeyCode::Char('s' | 'S') => Some(Action::Sort),
        KeyCode::Char('/') => Some(Action::StartFilter),
        KeyCode::Char('k') => Some(Action::Up),
        KeyCode::Char('j') => Some(Action::Down),
        _ => None,
    }
}

fn movement(code: KeyCode) -> Option<Action> {
    Some(match code {
        KeyCode::Up => Action::Up,
        KeyCode::Down => Action::Down,
        KeyCode::PageUp => Action::PageUp,
        KeyCode::PageDown => Action::PageDown,
        KeyCode::Home => Action::Home,
        KeyCode::End => Action::End,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn letters_are_commands_unless_a_filter_is_typed() {
        assert_eq!(action(key(KeyCode::Char('q')), false, false), Some(Action::Quit));
        assert_eq!(action(key(KeyCode::Char('q')), true, false), Some(Action::Type('q')));
        assert_eq!(action(key(KeyCode::Char('s')), false, false), Some(Action::Sort));
        assert_eq!(action(key(KeyCode::Char('/')), false, false), Some(Action::StartFilter));
        assert_eq!(action(key(KeyCode::Esc), false, false), Some(Action::Quit));
        assert_eq!(action(key(KeyCode::Esc), true, false), Some(Action::CancelTyping));
        assert_eq!(
            action(key(KeyCode::Esc), false, true),
            Some(Action::ClearFilter),
            "clears before it quits"
        );
        assert_eq!(action(key(KeyCode::Char('q')), false, true), Some(Action::Quit));
        assert_eq!(action(key(KeyCode::Enter), true, false), Some(Action::ApplyFilter));
        assert_eq!(action(key(KeyCode::Backspace), true, false), Some(Action::Erase));
        assert_eq!(action(key(KeyCode::Down), true, false), Some(Action::Down));
        assert_eq!(action(key(KeyCode::PageDown), false, false), Some(Action::PageDown));
        assert_eq!(action(key(KeyCode::Char('x')), false, false), None);
    }

    #[test]
    fn ctrl_c_quits_even_while_typing() {
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(action(ctrl_c, true, false), Some(Action::Quit));
        assert_eq!(action(ctrl_c, false, false), Some(Action::Quit));
        let mut release = key(KeyCode::Char('q'));
        release.kind = KeyEventKind::Release;
        assert_eq!(action(release, false, false), None);
    }
}
