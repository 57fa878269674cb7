use std::path::PathBuf;

use super::*;

#[test]
fn start_and_vsize_count_from_the_command_names_last_parenthesis() {
    let stat = b"42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 5551 123456789 100 18446744073709551615";
    assert_eq!(start_and_vsize(stat), Some((5551, 123456789)));
    assert_eq!(start_and_vsize(b"42 (a) S 1"), None);
    assert_eq!(start_and_vsize(b""), None);
    let own = std::fs::read("/proc/self/stat").unwrap();
    assert!(start_and_vsize(&own).is_some_and(|(_, vsize)| vsize > 0));
}

/// A process the rescan already looked at that then maps a driver library
/// (as a `dlopen` after start does) is read again: its size changed.
#[test]
fn a_process_looked_at_before_it_maps_a_driver_library_is_read_again() {
    use std::os::fd::AsRawFd;
    let mut rescan = Rescan::default();
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libcuda.so.1");
    let len = 1 << 16;
    std::fs::write(&lib, vec![0u8; len]).unwrap();
    let mine = PathBuf::from(format!("/proc/{}/root{}", std::process::id(), lib.display()));
    assert!(!rescan.mapped_since().contains(&mine));
    let file = std::fs::File::open(&lib).unwrap();
    // SAFETY: a private read-only mapping of a file this test made,
    // unmapped below; nothing reads through it.
    let at = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0)
    };
    assert_ne!(at, libc::MAP_FAILED);
    let found = rescan.mapped_since();
    // SAFETY: unmaps exactly the mapping made above.
    unsafe { libc::munmap(at, len) };
    assert!(found.contains(&mine), "{found:?}");
}

/// One read holds a process's whole `stat` line: the same as read to the
/// end.
#[test]
fn one_read_holds_a_whole_stat_line() {
    let mut buf = [0u8; STAT_BYTES];
    let pid = std::process::id();
    let one = read_stat(pid, &mut buf).unwrap().to_vec();
    let whole = std::fs::read(format!("/proc/{pid}/stat")).unwrap();
    assert!(one.ends_with(b"\n") && one.len() < STAT_BYTES, "{}", String::from_utf8_lossy(&one));
    // Between the two reads times and counters can move, not the pid, the
    // name, the state (this thread, running), the parent, the group or the
    // start time.
    let first_five =
        |s: &[u8]| String::from_utf8_lossy(s).split(' ').take(5).map(String::from).collect::<Vec<_>>();
    assert_eq!(first_five(&one), first_five(&whole));
    assert_eq!(start_and_vsize(&one).map(|s| s.0), start_and_vsize(&whole).map(|s| s.0));
    assert!(read_stat(u32::MAX, &mut buf).is_err(), "no such process");
}
