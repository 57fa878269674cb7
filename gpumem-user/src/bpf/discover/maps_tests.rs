//! The text scan of `/proc/PID/maps` (`library_paths`), against examples
//! and against procfs's own parse of the same text.
use std::path::PathBuf;

use procfs::{
    process::{MMapPath, MemoryMaps},
    FromBufRead,
};
use proptest::prelude::*;

use super::*;

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
    /// The text scan finds exactly the driver's files, once each, that
    /// procfs's parse of the same maps names.
    #[test]
    fn the_text_scan_agrees_with_procfs(lines in prop::collection::vec((path(), 1usize..30), 0..12)) {
        let text: String = lines
            .iter()
            .enumerate()
            .map(|(i, (p, pad))| format!("{:x}-{:x} r-xp 00000000 08:01 {i}{}{p}\n", i * 4096, i * 4096 + 4096, " ".repeat(*pad)))
            .collect();
        let parsed = MemoryMaps::from_buf_read(text.as_bytes()).unwrap();
        let mut want: Vec<PathBuf> = Vec::new();
        for m in parsed.iter() {
            if let MMapPath::Path(path) = &m.pathname {
                if kind_of(path).is_some() && !want.contains(path) {
                    want.push(path.clone());
                }
            }
        }
        let got: Vec<PathBuf> = library_paths(text.as_bytes()).into_iter().map(PathBuf::from).collect();
        prop_assert_eq!(got, want);
    }
}
