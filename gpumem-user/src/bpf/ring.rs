//! The records' ring buffer, read so that no record is given back to the
//! kernel before it is written out. [`Ring::next_record`] reads ahead of the
//! consumer position the kernel sees; [`Ring::commit`] moves that
//! position up to what was read, once it has been written. An agent
//! killed in between (SIGKILL, the OOM killer) leaves those records in
//! the ring, pinned with `--persist`, and its successor writes them: a
//! record reaches the output at least once (twice only if the kill falls
//! between a write and its commit), never lost. aya's `RingBuf` gives
//! each record back to the kernel as soon as it is dropped, before the
//! agent could write it.
//!
//! The layout is the kernel's (`kernel/bpf/ringbuf.c`): one page with the
//! consumer position (the only one user space writes), then one with the
//! producer position, then the data pages, mapped twice in a row so that
//! a record that wraps reads as one slice. Each record starts with an
//! 8-byte header: its length, with a busy bit while its producer writes it
//! and a discard bit if it gave it up.
use std::{
    os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd},
    ptr::NonNull,
    sync::atomic::{fence, AtomicU32, AtomicUsize, Ordering},
};

use aya::maps::{Map, MapData, MapError};

const BUSY: u32 = 1 << 31;
const DISCARD: u32 = 1 << 30;
const HEADER: usize = 8;

/// Why the ring buffer could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    #[error("the map is not a ring buffer")]
    NotARing,
    #[error("reading the ring buffer's size: {0}")]
    Info(#[source] MapError),
    #[error("the ring buffer's size {0} is not a power of two")]
    Size(u32),
    #[error("mapping the ring buffer's {what} into memory: {source}")]
    Map { what: &'static str, source: std::io::Error },
}

/// A reader of the records' ring buffer that commits what it read only
/// when told (see the module's doc).
pub struct Ring {
    map: MapData,
    consumer: Mapping,
    producer: Mapping,
    page: usize,
    mask: usize,
    /// Where the next record starts: the consumer position plus what was
    /// read and not yet committed.
    read: usize,
    /// The producer position last read: records up to it are read without
    /// touching the producer's cache line again.
    produced: usize,
}

impl Ring {
    /// Maps the ring buffer `map`; reading starts at the position the
    /// kernel has for its consumer (records a killed agent read and did
    /// not commit are read again).
    pub fn new(map: Map) -> Result<Self, RingError> {
        let Map::RingBuf(map) = map else { return Err(RingError::NotARing) };
        let size = map.info().map_err(RingError::Info)?.max_entries();
        if !size.is_power_of_two() {
            return Err(RingError::Size(size));
        }
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let fd = map.fd().as_fd();
        let consumer = Mapping::new(fd, page, libc::PROT_READ | libc::PROT_WRITE, 0, "consumer page")?;
        let producer = Mapping::new(fd, page + 2 * size as usize, libc::PROT_READ, page, "data pages")?;
        let mut ring = Self { map, consumer, producer, page, mask: size as usize - 1, read: 0, produced: 0 };
        ring.read = ring.consumer_pos().load(Ordering::Acquire);
        ring.produced = ring.read;
        Ok(ring)
    }

    fn consumer_pos(&self) -> &AtomicUsize {
        // SAFETY: the consumer page is mapped for as long as `self`, and
        // starts with the kernel's `unsigned long consumer_pos`, aligned.
        unsafe { self.consumer.ptr.cast::<AtomicUsize>().as_ref() }
    }

    fn producer_pos(&self) -> &AtomicUsize {
        // SAFETY: as above, for the producer page's `producer_pos`.
        unsafe { self.producer.ptr.cast::<AtomicUsize>().as_ref() }
    }

    /// The next complete record after those read, or None when there is
    /// none yet (none submitted, or the next still being written).
    /// Reading moves nothing the kernel sees: see [`Ring::commit`].
    pub fn next_record(&mut self) -> Option<&[u8]> {
        loop {
            if self.read == self.produced {
                self.produced = self.producer_pos().load(Ordering::Acquire);
                if self.read == self.produced {
                    return None;
                }
            }
            let at = self.page + (self.read & self.mask);
            // SAFETY: `at` is within the first copy of the data pages, the
            // header is 8-aligned (records are), and the kernel writes it
            // atomically (release) when the record is submitted.
            let header =
                unsafe { self.producer.ptr.add(at).cast::<AtomicU32>().as_ref() }.load(Ordering::Acquire);
            let (len, step) = match Header::of(header, self.mask + 1) {
                Header::Busy | Header::Invalid => return None,
                Header::Discarded { step } => {
                    self.read += step;
                    continue;
                }
                Header::Record { len, step } => (len, step),
            };
            self.read += step;
            // The record is no longer than the ring (`Header::of`), and the data
            // pages follow themselves once more: it lies in the mapping.
            // SAFETY: the kernel does not reuse these bytes before the
            // consumer position passes them, which only `commit` does,
            // and `commit` takes `&mut self`, ending this borrow.
            return Some(unsafe {
                std::slice::from_raw_parts(self.producer.ptr.add(at + HEADER).as_ptr(), len)
            });
        }
    }

    /// Gives the records read so far back to the kernel: call once they
    /// have been written.
    pub fn commit(&mut self) {
        self.consumer_pos().store(self.read, Ordering::Release);
        // Pairs with a producer's check of the consumer position when it
        // decides whether to wake the agent (as libbpf and aya do).
        fence(Ordering::SeqCst);
    }

    /// The ring's size in bytes.
    pub fn size(&self) -> usize {
        self.mask + 1
    }

    /// Bytes the producers have reserved past those read: after a drain,
    /// a record still being written (busy) and every record behind it.
    pub fn unread(&self) -> usize {
        self.producer_pos().load(Ordering::Acquire).wrapping_sub(self.read)
    }

    /// Bytes read and not yet committed.
    pub fn uncommitted(&self) -> usize {
        self.read.wrapping_sub(self.consumer_pos().load(Ordering::Relaxed))
    }
}

/// What a record's header word says, in a ring of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Header {
    /// Reserved, still being written: nothing after it can be read yet.
    Busy,
    /// Given up by its producer: `step` bytes to skip.
    Discarded { step: usize },
    /// `len` bytes of record after the header; the next is `step` on.
    Record { len: usize, step: usize },
    /// Longer than the ring: never from the kernel (it refuses such
    /// reservations); read no further rather than past the mapping.
    Invalid,
}

impl Header {
    fn of(word: u32, size: usize) -> Self {
        let len = (word & !(BUSY | DISCARD)) as usize;
        let step = (HEADER + len).next_multiple_of(8);
        if word & BUSY != 0 {
            Self::Busy
        } else if step > size {
            Self::Invalid
        } else if word & DISCARD != 0 {
            Self::Discarded { step }
        } else {
            Self::Record { len, step }
        }
    }
}

impl AsFd for Ring {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.map.fd().as_fd()
    }
}

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

/// One `mmap` of the map, unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(
        fd: BorrowedFd<'_>,
        len: usize,
        prot: i32,
        offset: usize,
        what: &'static str,
    ) -> Result<Self, RingError> {
        let offset = libc::off_t::try_from(offset).map_err(|_| RingError::Map {
            what,
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        // SAFETY: a new shared mapping of the map's fd; nothing else is
        // mapped at the address the kernel picks.
        let ptr =
            unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), offset) };
        if ptr == libc::MAP_FAILED {
            return Err(RingError::Map { what, source: std::io::Error::last_os_error() });
        }
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or(RingError::Map { what, source: std::io::Error::from(std::io::ErrorKind::InvalidData) })?;
        Ok(Self { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped, once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

// SAFETY: the mappings are plain shared memory, only read through atomics
// and slices tied to `&mut self`; the agent's one task owns the ring.
unsafe impl Send for Ring {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_says_busy_discarded_or_a_record_and_where_the_next_starts() {
        assert_eq!(Header::of(BUSY | 40, 4096), Header::Busy);
        assert_eq!(Header::of(BUSY | DISCARD | 40, 4096), Header::Busy);
        assert_eq!(Header::of(DISCARD | 13, 4096), Header::Discarded { step: 24 });
        assert_eq!(Header::of(13, 4096), Header::Record { len: 13, step: 24 });
        assert_eq!(Header::of(0, 4096), Header::Record { len: 0, step: 8 });
        assert_eq!(Header::of(4088, 4096), Header::Record { len: 4088, step: 4096 });
        assert_eq!(Header::of(4089, 4096), Header::Invalid);
        assert_eq!(Header::of(!BUSY, 4096), Header::Invalid);
    }
}
