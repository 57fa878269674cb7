//! Resolving driver symbols to file offsets, once per library file.
//!
//! aya can resolve a symbol per attach, but that parses the ELF file each
//! time; a real libcuda is tens of megabytes and the table has dozens of
//! rows. Parsing once also shows which symbols share an address (aliases),
//! which must be attached once or every call would be counted twice.
use std::{collections::HashMap, path::Path};

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error("cannot read {path}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} is not an ELF shared object gpumem can read")]
    Parse { path: String, source: object::Error },
}

/// Function symbols of one file, by name, as file offsets.
#[derive(Debug, Default)]
pub struct SymbolOffsets {
    by_name: HashMap<String, u64>,
    /// Per symbol, the distance from its first byte to the first 0xC3 byte
    /// after it in the same section: a `ret` instruction when jumped to,
    /// which `deny` returns through.
    ret_delta: HashMap<String, u32>,
}

/// How far after a function's start a `ret` byte is looked for.
const RET_SEARCH: usize = 1 << 16;

impl SymbolOffsets {
    pub fn load(path: &Path) -> Result<Self, SymbolError> {
        let data = std::fs::read(path)
            .map_err(|source| SymbolError::Read { path: path.display().to_string(), source })?;
        Self::parse(&data).map_err(|source| SymbolError::Parse { path: path.display().to_string(), source })
    }

    pub fn parse(data: &[u8]) -> Result<Self, object::Error> {
        let file = object::File::parse(data)?;
        let mut by_name = HashMap::new();
        let mut ret_delta = HashMap::new();
        // Exported (dynamic) symbols first; the static table, when present,
        // only fills in what the dynamic one lacks.
        for sym in file.dynamic_symbols().chain(file.symbols()) {
            if sym.kind() != SymbolKind::Text || !sym.is_definition() {
                continue;
            }
            let (Ok(name), Some(index)) = (sym.name(), sym.section_index()) else {
                continue;
            };
            let Ok(section) = file.section_by_index(index) else {
                continue;
            };
            let Some((file_start, file_size)) = section.file_range() else {
                continue;
            };
            let Some(offset) =
                sym.address().checked_sub(section.address()).and_then(|d| d.checked_add(file_start))
            else {
                continue;
            };
            if by_name.contains_key(name) {
                continue;
            }
            by_name.insert(name.to_string(), offset);
            let end = (file_start + file_size).min(data.len() as u64) as usize;
            if let Some(delta) = first_ret(data, offset as usize, end) {
                ret_delta.insert(name.to_string(), delta);
            }
        }
        Ok(Self { by_name, ret_delta })
    }

    /// The distance from `symbol` to a `ret` byte after its start, if any.
    pub fn ret_delta(&self, symbol: &str) -> Option<u32> {
        self.ret_delta.get(symbol).copied()
    }

    pub fn offset(&self, symbol: &str) -> Option<u64> {
        self.by_name.get(symbol).copied()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// x86-64's `ret` (near return) opcode.
pub const RET: u8 = 0xC3;

/// The distance from `start` to the first [`RET`] byte after it, before `end`.
fn first_ret(data: &[u8], start: usize, end: usize) -> Option<u32> {
    let from = start.checked_add(1)?;
    let to = end.min(start.saturating_add(RET_SEARCH));
    let window = data.get(from..to)?;
    window.iter().position(|&b| b == RET).map(|i| (i + 1) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_exported_functions_of_a_real_library() {
        // libc is on every machine that runs these tests.
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6", "/lib64/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("no libc.so.6 found to test symbol resolution on");
        let syms = SymbolOffsets::load(libc).unwrap();
        let malloc = syms.offset("malloc").expect("malloc in libc");
        assert!(malloc > 0);
        assert!(syms.offset("no_such_symbol_in_libc").is_none());
    }

    #[test]
    fn a_ret_byte_is_found_after_the_function_start_within_its_section() {
        let code = [0xC3, 0x55, 0x48, 0x89, 0xE5, 0xC3, 0x90];
        assert_eq!(first_ret(&code, 0, code.len()), Some(5), "the byte at the start itself is skipped");
        assert_eq!(first_ret(&code, 1, code.len()), Some(4));
        assert_eq!(first_ret(&code, 0, 5), None, "the section ends before the ret");
        assert_eq!(first_ret(&code, 9, code.len()), None);
        // Every function of a real library has one.
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6", "/lib64/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("no libc.so.6");
        let syms = SymbolOffsets::load(libc).unwrap();
        let data = std::fs::read(libc).unwrap();
        let (off, delta) = (syms.offset("malloc").unwrap(), syms.ret_delta("malloc").unwrap());
        assert_eq!(data[(off + delta as u64) as usize], RET);
    }

    #[test]
    fn garbage_is_a_parse_error_not_a_panic() {
        assert!(SymbolOffsets::parse(b"definitely not an ELF file").is_err());
    }
}
