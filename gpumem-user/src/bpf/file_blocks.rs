//! A file read in blocks, each block only when first asked for: what
//! `symbols.rs` parses a driver library through. A real libcuda is tens
//! of megabytes (NVIDIA's 550: 28 MB, read whole in 15 to 17 ms at a
//! start), of which the symbol tables and the probed functions' code are
//! a few hundred kilobytes. Read, not mapped: a library may be a file a
//! container owns, and a mapped file truncated under the agent would
//! fault it; here a file that shrank is an I/O error.
use std::{
    collections::HashMap,
    fs::File,
    io::{self, Read, Seek, SeekFrom},
    os::unix::fs::FileExt,
    path::Path,
};

/// Bytes a block.
const BLOCK: u64 = 64 << 10;

/// A file and the blocks of it read so far; [`Read`] and [`Seek`] as a
/// file's, from the blocks.
pub struct FileBlocks {
    file: File,
    len: u64,
    pos: u64,
    blocks: HashMap<u64, Box<[u8]>>,
}

impl FileBlocks {
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(Self { file, len, pos: 0, blocks: HashMap::new() })
    }

    /// The file's bytes read so far.
    #[cfg(test)]
    fn bytes_read(&self) -> u64 {
        self.blocks.values().map(|b| b.len() as u64).sum()
    }

    /// Block `index` (the last one may be short), read where not yet.
    fn block(&mut self, index: u64) -> io::Result<&[u8]> {
        if !self.blocks.contains_key(&index) {
            let start = index * BLOCK;
            let mut buf = vec![0; self.len.saturating_sub(start).min(BLOCK) as usize];
            self.file.read_exact_at(&mut buf, start)?;
            self.blocks.insert(index, buf.into_boxed_slice());
        }
        Ok(&self.blocks[&index])
    }
}

impl Read for FileBlocks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let pos = self.pos;
        let within = (pos % BLOCK) as usize;
        let block = self.block(pos / BLOCK)?;
        let n = buf.len().min(block.len().saturating_sub(within));
        buf[..n].copy_from_slice(&block[within..within + n]);
        self.pos = pos + n as u64;
        Ok(n)
    }
}

impl Seek for FileBlocks {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos =
            pos.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a seek before the file's start"))?;
        Ok(self.pos)
    }
}

impl std::fmt::Debug for FileBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileBlocks").field("len", &self.len).field("blocks_read", &self.blocks.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use proptest::prelude::*;

    use super::*;

    fn file_of(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    proptest! {
        /// Any reads at any places give the file's own bytes, and read
        /// only the blocks they touch.
        #[test]
        fn reads_give_the_files_bytes(
            len in 0usize..300_000,
            reads in proptest::collection::vec((0u64..320_000, 0usize..100_000), 1..12),
        ) {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            let f = file_of(&bytes);
            let mut b = FileBlocks::open(f.path()).unwrap();
            let mut touched = std::collections::HashSet::new();
            for (at, n) in reads {
                b.seek(SeekFrom::Start(at)).unwrap();
                let mut got = Vec::new();
                (&mut b).take(n as u64).read_to_end(&mut got).unwrap();
                let start = (at as usize).min(len);
                let want = &bytes[start..(start + n).min(len)];
                prop_assert_eq!(&got[..], want);
                for i in (start..start + want.len()).step_by(1024) {
                    touched.insert(i as u64 / BLOCK);
                }
                if !want.is_empty() {
                    touched.insert((start + want.len() - 1) as u64 / BLOCK);
                }
            }
            let touched_bytes: u64 =
                touched.iter().map(|&i| (len as u64).saturating_sub(i * BLOCK).min(BLOCK)).sum();
            prop_assert_eq!(b.bytes_read(), touched_bytes);
        }
    }

    #[test]
    fn a_seek_before_the_start_is_an_error_and_the_end_reads_nothing() {
        let f = file_of(b"0123456789");
        let mut b = FileBlocks::open(f.path()).unwrap();
        assert!(b.seek(SeekFrom::End(-11)).is_err());
        assert_eq!(b.seek(SeekFrom::End(-3)).unwrap(), 7);
        let mut rest = String::new();
        b.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "789");
        assert_eq!(b.read(&mut [0; 4]).unwrap(), 0);
    }

    #[test]
    fn a_file_that_shrank_is_an_error_not_a_fault() {
        let f = file_of(&[1; 200_000]);
        let mut b = FileBlocks::open(f.path()).unwrap();
        f.as_file().set_len(10).unwrap();
        b.seek(SeekFrom::Start(150_000)).unwrap();
        assert!(b.read(&mut [0; 16]).is_err());
    }
}
