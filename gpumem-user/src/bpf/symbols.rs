//! Resolving driver symbols to file offsets and code, once per library
//! file.
//!
//! aya can resolve a symbol per attach, but that parses the ELF file each
//! time; a real libcuda is tens of megabytes and the table has dozens of
//! rows. Parsing once also shows which symbols share an address (aliases),
//! which must be attached once or every call would be counted twice. The
//! functions' code is kept for choosing each probe's site (`site`).
use std::{collections::HashMap, path::Path};

use object::{Object, ObjectSection, ObjectSymbol, ReadCache, ReadRef, SymbolKind};

use super::file_blocks::FileBlocks;

#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error("cannot read {path}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} is not an ELF shared object gpumem can read")]
    Parse { path: String, source: object::Error },
}

/// A function in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Function {
    /// Its first byte, as a file offset.
    offset: u64,
    /// Its code's length: the symbol's size, or to the end of its section
    /// (at most [`UNSIZED`]) when the symbol has none.
    len: u64,
}

/// How much code an unsized symbol is taken to have.
const UNSIZED: u64 = 1 << 16;

/// Function symbols of one file, by name, with their code, which is read
/// from the file when asked for (as the symbol tables were: only the
/// blocks of the file they are in, `file_blocks.rs`).
#[derive(Debug)]
pub struct SymbolOffsets {
    by_name: HashMap<String, Function>,
    file: ReadCache<FileBlocks>,
}

impl SymbolOffsets {
    pub fn load(path: &Path) -> Result<Self, SymbolError> {
        let blocks = FileBlocks::open(path)
            .map_err(|source| SymbolError::Read { path: path.display().to_string(), source })?;
        Self::parse(ReadCache::new(blocks))
            .map_err(|source| SymbolError::Parse { path: path.display().to_string(), source })
    }

    fn parse(file: ReadCache<FileBlocks>) -> Result<Self, object::Error> {
        let mut by_name = HashMap::new();
        {
            let elf = object::File::parse(&file)?;
            // Known once parsed (the parse reads it first).
            let len = (&file).len().unwrap_or(0);
            // Exported (dynamic) symbols first; the static table, when
            // present, only fills in what the dynamic one lacks.
            for sym in elf.dynamic_symbols().chain(elf.symbols()) {
                if sym.kind() != SymbolKind::Text || !sym.is_definition() {
                    continue;
                }
                let (Ok(name), Some(function)) = (sym.name(), function(&elf, &sym, len)) else {
                    continue;
                };
                by_name.entry(name.to_string()).or_insert(function);
            }
        }
        Ok(Self { by_name, file })
    }

    /// Where `symbol` starts in the file.
    pub fn offset(&self, symbol: &str) -> Option<u64> {
        self.by_name.get(symbol).map(|f| f.offset)
    }

    /// `symbol`'s code (None, too, where the file can no longer be read
    /// there).
    pub fn code(&self, symbol: &str) -> Option<&[u8]> {
        let f = self.by_name.get(symbol)?;
        (&self.file).read_bytes_at(f.offset, f.len).ok()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// A text symbol's place in the file, if it has one within the file.
fn function<'a, R: ReadRef<'a>>(
    file: &object::File<'a, R>,
    sym: &object::Symbol<'a, '_, R>,
    file_len: u64,
) -> Option<Function> {
    let section = file.section_by_index(sym.section_index()?).ok()?;
    let (file_start, file_size) = section.file_range()?;
    let offset = sym.address().checked_sub(section.address())?.checked_add(file_start)?;
    let section_end = (file_start + file_size).min(file_len);
    let rest = section_end.checked_sub(offset)?;
    let len = if sym.size() > 0 { sym.size().min(rest) } else { rest.min(UNSIZED) };
    Some(Function { offset, len })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libc() -> &'static Path {
        // libc is on every machine that runs these tests.
        ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6", "/lib64/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("no libc.so.6 found to test symbol resolution on")
    }

    #[test]
    fn finds_exported_functions_of_a_real_library_with_their_code() {
        let syms = SymbolOffsets::load(libc()).unwrap();
        let malloc = syms.offset("malloc").expect("malloc in libc");
        assert!(malloc > 0);
        assert!(syms.offset("no_such_symbol_in_libc").is_none());
        let data = std::fs::read(libc()).unwrap();
        let code = syms.code("malloc").unwrap();
        assert_eq!(code, &data[malloc as usize..malloc as usize + code.len()]);
        // Every function of a real library has a `ret` instruction.
        assert!(crate::bpf::site::ret_after(code, 0).is_some());
    }

    #[test]
    fn garbage_is_a_parse_error_not_a_panic() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, b"definitely not an ELF file").unwrap();
        assert!(matches!(SymbolOffsets::load(f.path()), Err(SymbolError::Parse { .. })));
    }
}
