//! The bpf(2) commands aya 0.14 cannot make for a multi-uprobe link:
//! loading a kprobe-type program with `expected_attach_type =
//! BPF_TRACE_UPROBE_MULTI`, and `BPF_LINK_CREATE` with its offsets and
//! cookies (kernel 6.6+); pinning. And creating a map apart from aya's
//! load (`bpf/early_map.rs`), and reading a hash map in batches
//! (`bpf/batch.rs`).
use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    path::Path,
};

use aya_obj::generated::{
    bpf_attach_type, bpf_attr, bpf_cmd, bpf_insn, bpf_prog_type, BPF_F_UPROBE_MULTI_RETURN,
};

/// bpf(2) with `attr`; what it returned, or the kernel's error.
///
/// # Safety
/// `attr` is a whole, zero-initialised bpf_attr whose pointers point at
/// buffers that outlive the call, of the sizes `cmd` reads and writes.
unsafe fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<nix::libc::c_long> {
    // SAFETY: the caller's promise.
    let ret = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_bpf,
            cmd as nix::libc::c_long,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret)
}

/// bpf(2) with `attr`; a new descriptor or the kernel's error.
fn bpf_fd(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    // SAFETY: every caller passes a zeroed bpf_attr whose pointers point
    // at buffers that outlive the call.
    let ret = unsafe { bpf(cmd, attr) }?;
    let fd =
        i32::try_from(ret).map_err(|_| io::Error::other("bpf(2) returned an out-of-range descriptor"))?;
    // SAFETY: the kernel just gave us this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A verifier's refusal with its log's last lines.
#[derive(Debug)]
pub struct LoadError {
    pub error: io::Error,
    pub log: String,
}

/// Loads `insns` as a uprobe program for multi-uprobe links, named `name`
/// (the kernel keeps the first 15 bytes). On refusal the load is repeated
/// with the verifier's log on, to say why; the error is the first load's
/// (a log that overflows its buffer makes the second fail with ENOSPC).
pub fn load(name: &str, insns: &[bpf_insn]) -> Result<OwnedFd, LoadError> {
    load_as(name, insns, Some(bpf_attach_type::BPF_TRACE_UPROBE_MULTI))
}

/// [`load`] with `expected_attach_type` `attach` (None: none, as aya loads
/// a uprobe program for a single link).
pub fn load_as(
    name: &str,
    insns: &[bpf_insn],
    attach: Option<bpf_attach_type>,
) -> Result<OwnedFd, LoadError> {
    let error = match load_with_log(name, insns, attach, 0, &mut []) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    // The few instructions of a test program log a few lines: a 16 MiB
    // buffer for them, freed, raised glibc's mmap threshold, and the
    // start-up's parsing left its 15 MB in the heap (idle RSS 19 -> 34 MB).
    let mut log = vec![0u8; if insns.len() < 64 { 64 << 10 } else { 16 << 20 }];
    if let Ok(fd) = load_with_log(name, insns, attach, 1, &mut log) {
        return Ok(fd);
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..end]);
    let tail: Vec<&str> = text.lines().rev().take(20).collect();
    let log = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
    Err(LoadError { error, log })
}

fn load_with_log(
    name: &str,
    insns: &[bpf_insn],
    attach: Option<bpf_attach_type>,
    level: u32,
    log: &mut [u8],
) -> io::Result<OwnedFd> {
    let license = c"GPL";
    // SAFETY: an all-zero bpf_attr is its documented empty value.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the program-load member of a zeroed union.
    let u = unsafe { &mut attr.__bindgen_anon_3 };
    u.prog_type = bpf_prog_type::BPF_PROG_TYPE_KPROBE as u32;
    u.expected_attach_type = attach.map_or(0, |a| a as u32);
    u.insn_cnt = u32::try_from(insns.len()).map_err(|_| io::Error::other("program too long"))?;
    u.insns = insns.as_ptr() as u64;
    u.license = license.as_ptr() as u64;
    for (dst, src) in u.prog_name.iter_mut().zip(name.bytes().take(15)) {
        *dst = src as nix::libc::c_char;
    }
    if level > 0 {
        u.log_level = level;
        u.log_size = u32::try_from(log.len()).unwrap_or(u32::MAX);
        u.log_buf = log.as_mut_ptr() as u64;
    }
    bpf_fd(bpf_cmd::BPF_PROG_LOAD, &mut attr)
}

/// One instruction of a small program of the agent's own: opcode,
/// destination and source registers, offset (the immediate 0).
pub fn insn(code: u8, dst: u8, src: u8, off: i16) -> bpf_insn {
    // SAFETY: bpf_insn is plain old data; all zeroes is `r0 op 0`.
    let mut i: bpf_insn = unsafe { std::mem::zeroed() };
    i.code = code;
    i.set_dst_reg(dst);
    i.set_src_reg(src);
    i.off = off;
    i
}

/// One multi-uprobe link of `prog` on `path`: a probe at each offset
/// (file offsets into the library) with the cookie at the same index;
/// `ret`: uretprobes.
pub fn link(prog: &OwnedFd, path: &Path, offsets: &[u64], cookies: &[u64], ret: bool) -> io::Result<OwnedFd> {
    assert_eq!(offsets.len(), cookies.len(), "one cookie per offset");
    let path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
    // SAFETY: an all-zero bpf_attr is its documented empty value.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the link-create member of a zeroed union.
    let l = unsafe { &mut attr.link_create };
    l.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
    l.attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
    // SAFETY: writing the uprobe_multi member of a zeroed union.
    let m = unsafe { &mut l.__bindgen_anon_3.uprobe_multi };
    m.path = path.as_ptr() as u64;
    m.offsets = offsets.as_ptr() as u64;
    m.cookies = cookies.as_ptr() as u64;
    m.cnt = u32::try_from(offsets.len()).map_err(|_| io::Error::other("too many offsets"))?;
    m.flags = if ret { BPF_F_UPROBE_MULTI_RETURN } else { 0 };
    bpf_fd(bpf_cmd::BPF_LINK_CREATE, &mut attr)
}

/// A map as the first five words of a legacy `bpf_map_def` define it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapDef {
    pub kind: u32,
    pub key: u32,
    pub value: u32,
    pub entries: u32,
    pub flags: u32,
}

/// Creates map `def`, named `name` (the kernel keeps the first 15 bytes).
pub fn create_map(name: &str, def: &MapDef) -> io::Result<OwnedFd> {
    // SAFETY: an all-zero bpf_attr is its documented empty value.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the map-create member of a zeroed union.
    let m = unsafe { &mut attr.__bindgen_anon_1 };
    (m.map_type, m.key_size, m.value_size, m.max_entries, m.map_flags) =
        (def.kind, def.key, def.value, def.entries, def.flags);
    for (dst, src) in m.map_name.iter_mut().zip(name.bytes().take(15)) {
        *dst = src as nix::libc::c_char;
    }
    bpf_fd(bpf_cmd::BPF_MAP_CREATE, &mut attr)
}

/// Pins `link` (or any bpf object) at `path` on bpffs (`BPF_OBJ_PIN`).
pub fn pin(link: &OwnedFd, path: &Path) -> io::Result<()> {
    let path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
    // SAFETY: an all-zero bpf_attr is its documented empty value.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the object-pin member of a zeroed union.
    let p = unsafe { &mut attr.__bindgen_anon_4 };
    p.pathname = path.as_ptr() as u64;
    p.bpf_fd = link.as_raw_fd() as u32;
    // BPF_OBJ_PIN returns 0, not a descriptor.
    // SAFETY: a zeroed bpf_attr; the path outlives the call.
    unsafe { bpf(bpf_cmd::BPF_OBJ_PIN, &mut attr) }.map(drop)
}

/// One `BPF_MAP_LOOKUP_BATCH` of hash map `map`: up to `count` entries,
/// from where `place` says (None: from the start), their keys written at
/// `keys` and their values at `values`; the entries written, the place
/// after them (a bucket's index, for the next call), and the kernel's
/// answer: Ok, or ENOENT with the map's last entries, ENOSPC where one
/// bucket holds more than `count` (none written), or another error.
///
/// # Safety
/// `keys` and `values` have room for `count` of the map's keys and values.
pub unsafe fn lookup_batch(
    map: BorrowedFd<'_>,
    place: Option<u32>,
    keys: *mut u8,
    values: *mut u8,
    count: u32,
) -> (u32, u32, io::Result<()>) {
    // The kernel reads the place (a u32 for hash maps) before it writes
    // the next one there.
    let mut token: u64 = u64::from(place.unwrap_or(0));
    let token_ptr = std::ptr::addr_of_mut!(token) as u64;
    // SAFETY: an all-zero bpf_attr is its documented empty value.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the batch member of a zeroed union.
    let b = unsafe { &mut attr.batch };
    b.in_batch = if place.is_some() { token_ptr } else { 0 };
    b.out_batch = token_ptr;
    (b.keys, b.values, b.count, b.map_fd) = (keys as u64, values as u64, count, map.as_raw_fd() as u32);
    // SAFETY: a zeroed bpf_attr; the token lives to the end of this
    // function, the buffers have room for `count` (the caller's promise).
    let result = unsafe { bpf(bpf_cmd::BPF_MAP_LOOKUP_BATCH, &mut attr) }.map(drop);
    // SAFETY: the kernel wrote back how many entries it copied.
    let written = unsafe { attr.batch.count };
    (written.min(count), token as u32, result)
}

/// One `BPF_MAP_LOOKUP_ELEM` of `map`: the value of `key` written to
/// `value`; ENOENT where there is none. For task storage the key is a
/// pidfd of the task (`bpf/in_flight.rs`).
///
/// # Safety
/// `key` and `value` are of the map's key and value sizes.
pub unsafe fn lookup(map: BorrowedFd<'_>, key: *const u8, value: *mut u8) -> io::Result<()> {
    // SAFETY: an all-zero bpf_attr is its documented empty value.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the element member of a zeroed union.
    let e = unsafe { &mut attr.__bindgen_anon_2 };
    e.map_fd = map.as_raw_fd() as u32;
    e.key = key as u64;
    e.__bindgen_anon_1.value = value as u64;
    // SAFETY: a zeroed bpf_attr; key and value are of the map's sizes (the
    // caller's promise) and outlive the call.
    unsafe { bpf(bpf_cmd::BPF_MAP_LOOKUP_ELEM, &mut attr) }.map(drop)
}
