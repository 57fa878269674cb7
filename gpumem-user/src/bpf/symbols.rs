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
}

impl SymbolOffsets {
    pub fn load(path: &Path) -> Result<Self, SymbolError> {
        let data = std::fs::read(path)
            .map_err(|source| SymbolError::Read { path: path.display().to_string(), source })?;
        Self::parse(&data).map_err(|source| SymbolError::Parse { path: path.display().to_string(), source })
    }

    pub fn parse(data: &[u8]) -> Result<Self, object::Error> {
        let file = object::File::parse(data)?;
        let mut by_name = HashMap::new();
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
            let Some((file_start, _)) = section.file_range() else {
                continue;
            };
            let Some(offset) =
                sym.address().checked_sub(section.address()).and_then(|d| d.checked_add(file_start))
            else {
                continue;
            };
            by_name.entry(name.to_string()).or_insert(offset);
        }
        Ok(Self { by_name })
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
    fn garbage_is_a_parse_error_not_a_panic() {
        assert!(SymbolOffsets::parse(b"definitely not an ELF file").is_err());
    }
}
