use std::path::PathBuf;

use procfs::FromBufRead;
use proptest::prelude::*;

use super::*;
use crate::bpf::discover::library_maps;

#[test]
fn start_and_vsize_count_from_the_command_names_last_parenthesis() {
    let stat = b"42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 5551 123456789 100 18446744073709551615";
    assert_eq!(start_and_vsize(stat), Some((5551, 123456789)));
    assert_eq!(start_and_vsize(b"42 (a) S 1"), None);
    assert_eq!(start_and_vsize(b""), None);
    let own = std::fs::read("/proc/self/stat").unwrap();
    assert!(start_and_vsize(&own).is_some_and(|(_, vsize)| vsize > 0));
}

#[test]
fn library_paths_are_the_drivers_files_once_each() {
    let maps = b"\
7f0000000000-7f0000001000 r--p 00000000 08:01 1234                       /usr/lib/x86_64-linux-gnu/libcuda.so.550.163.01
7f0000001000-7f0000002000 r-xp 00001000 08:01 1234                       /usr/lib/x86_64-linux-gnu/libcuda.so.550.163.01
7f0000002000-7f0000003000 r--p 00000000 08:01 99                         /usr/local/cuda/lib64/libcudart.so.12
7f0000003000-7f0000004000 r--p 00000000 08:01 98                         /usr/local/cuda/lib64/stubs/libcuda.so
7f0000004000-7f0000005000 r--p 00000000 08:01 97                         /opt/my dir/libnvidia-ml.so.1
7f0000005000-7f0000006000 rw-p 00000000 00:00 0 
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
7f0000006000-7f0000007000 r--p 00000000 08:01 96                         /usr/lib/libcuda.so.1 (deleted)
";
    assert_eq!(
        library_paths(maps),
        [
            "/usr/lib/x86_64-linux-gnu/libcuda.so.550.163.01",
            "/opt/my dir/libnvidia-ml.so.1",
            "/usr/lib/libcuda.so.1 (deleted)",
        ]
    );
    assert!(library_paths(b"").is_empty());
}

/// A maps line's path: the driver's files and others, with spaces, in
/// directories named like them, and special mappings.
fn path() -> impl Strategy<Value = String> {
    let dir = prop::sample::select(vec!["/usr/lib", "/a b", "/x/stubs", "/libcuda.so.1", "/tmp/ x"]);
    let name = prop::sample::select(vec![
        "libcuda.so.1",
        "libcuda.so",
        "libnvidia-ml.so.1",
        "libcudart.so.12",
        "libc.so.6",
        "libcuda.so.1 (deleted)",
        "my libcuda.so",
    ]);
    prop_oneof![
        (dir, name).prop_map(|(d, n)| format!("{d}/{n}")),
        prop::sample::select(vec!["", "[heap]", "[vdso]", "[stack]"]).prop_map(str::to_string),
    ]
}

proptest! {
    /// The text scan finds exactly what procfs's parse of the same maps
    /// finds (`discover::library_maps`, used at start-up).
    #[test]
    fn the_text_scan_agrees_with_procfs(lines in prop::collection::vec((path(), 1usize..30), 0..12)) {
        let text: String = lines
            .iter()
            .enumerate()
            .map(|(i, (p, pad))| format!("{:x}-{:x} r-xp 00000000 08:01 {i}{}{p}\n", i * 4096, i * 4096 + 4096, " ".repeat(*pad)))
            .collect();
        let parsed = procfs::process::MemoryMaps::from_buf_read(text.as_bytes()).unwrap();
        let want: Vec<PathBuf> = library_maps(&parsed);
        let got: Vec<PathBuf> = library_paths(text.as_bytes()).into_iter().map(PathBuf::from).collect();
        prop_assert_eq!(got, want);
    }
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
