//! Where a field sits in a kernel structure, read from the kernel's own
//! BTF (`/sys/kernel/btf/vmlinux`): what the fork program needs to read a
//! child's tgid (`task_struct.tgid`, whose offset differs from build to
//! build), and what every program reads of its calling thread in place
//! (its pid and tgid, its cgroup, the comm its records carry: gpumem-ebpf's
//! base/task.rs), without CO-RE relocations in the object. A small reader
//! of the BTF format (Documentation/bpf/btf.rst): the header, then type
//! records of known sizes, then the strings.

/// The byte offset of `field` in `struct name`, as `btf` (the raw BTF)
/// lays it out; None where the structure, the field, or a readable BTF is
/// missing, or the field is a bit field.
pub fn field_offset(btf: &[u8], name: &str, field: &str) -> Option<u32> {
    let word = |at: usize| btf.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if btf.get(..2)? != [0x9f, 0xeb] {
        return None; // not BTF, or not little-endian
    }
    let hdr_len = word(4)? as usize;
    let (type_off, type_len, str_off) = (word(8)? as usize, word(12)? as usize, word(16)? as usize);
    let types = hdr_len.checked_add(type_off)?;
    let strings = hdr_len.checked_add(str_off)?;
    let string = |off: u32| -> Option<&[u8]> {
        let s = btf.get(strings.checked_add(off as usize)?..)?;
        Some(&s[..s.iter().position(|&b| b == 0)?])
    };
    let mut at = types;
    let end = types.checked_add(type_len)?.min(btf.len());
    while at + 12 <= end {
        let (name_off, info) = (word(at)?, word(at + 4)?);
        let (kind, vlen, kind_flag) = ((info >> 24) & 0x1f, (info & 0xffff) as usize, info >> 31);
        let body = at + 12;
        if kind == STRUCT && string(name_off)? == name.as_bytes() {
            return (0..vlen).find_map(|m| {
                let member = body + 12 * m;
                (string(word(member)?)? == field.as_bytes()).then_some(())?;
                let offset = word(member + 8)?;
                let bits = if kind_flag != 0 { offset & 0xff_ffff } else { offset };
                let bitfield = kind_flag != 0 && offset >> 24 != 0;
                (bits % 8 == 0 && !bitfield).then_some(bits / 8)
            });
        }
        at = body + extra(kind, vlen)?;
    }
    None
}

const STRUCT: u32 = 4;

/// The bytes a type record of `kind` carries after its 12-byte head.
fn extra(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        // INT, VAR, DECL_TAG: one word.
        1 | 14 | 17 => 4,
        // ARRAY.
        3 => 12,
        // STRUCT, UNION, DATASEC, ENUM64: three words a member.
        4 | 5 | 15 | 19 => 12 * vlen,
        // ENUM, FUNC_PROTO: two words a member.
        6 | 13 => 8 * vlen,
        // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG.
        2 | 7..=12 | 16 | 18 => 0,
        _ => return None,
    })
}

/// `task_struct.tgid` in the running kernel (None where it cannot be
/// found: forks then do not pass declared limits to their children).
pub fn task_tgid() -> Option<u32> {
    task_fields().tgid
}

/// `task_struct.comm` in the running kernel (None where it cannot be
/// found: the programs then read the comm through a helper, slower).
pub fn task_comm() -> Option<u32> {
    task_fields().comm
}

/// `task_struct.pid` and `task_struct.tgid` (None where either cannot be
/// found: the programs then ask a helper).
pub fn task_pid_tgid() -> Option<(u32, u32)> {
    let f = task_fields();
    Some((f.pid?, f.tgid?))
}

/// The fields `bpf_get_current_cgroup_id` walks from a task to its cgroup
/// id on the v2 hierarchy: `task_struct.cgroups`, `css_set.dfl_cgrp`,
/// `cgroup.kn`, `kernfs_node.id` (None where one cannot be found: the
/// programs then ask the helper).
pub fn task_cgroup_path() -> Option<[u32; 4]> {
    task_fields().cgroup_path
}

/// The fields the programs read.
#[derive(Clone, Copy)]
struct TaskFields {
    pid: Option<u32>,
    tgid: Option<u32>,
    comm: Option<u32>,
    cgroup_path: Option<[u32; 4]>,
}

/// [`TaskFields`], from the kernel's BTF, read once (5 MB).
fn task_fields() -> TaskFields {
    static FIELDS: std::sync::OnceLock<TaskFields> = std::sync::OnceLock::new();
    *FIELDS.get_or_init(|| match std::fs::read("/sys/kernel/btf/vmlinux") {
        Ok(btf) => TaskFields {
            pid: field_offset(&btf, "task_struct", "pid"),
            tgid: field_offset(&btf, "task_struct", "tgid"),
            comm: field_offset(&btf, "task_struct", "comm"),
            cgroup_path: cgroup_path(&btf),
        },
        Err(_) => TaskFields { pid: None, tgid: None, comm: None, cgroup_path: None },
    })
}

/// The walk of [`task_cgroup_path`] in `btf`.
fn cgroup_path(btf: &[u8]) -> Option<[u32; 4]> {
    Some([
        field_offset(btf, "task_struct", "cgroups")?,
        field_offset(btf, "css_set", "dfl_cgrp")?,
        field_offset(btf, "cgroup", "kn")?,
        field_offset(btf, "kernfs_node", "id")?,
    ])
}

#[cfg(test)]
mod tests {
    use super::field_offset;

    /// A BTF of one int and `struct s { int a; int b; }`.
    fn tiny() -> Vec<u8> {
        let strings = b"\0int\0s\0a\0b\0";
        let mut types = Vec::new();
        let mut push = |words: &[u32]| words.iter().for_each(|w| types.extend(w.to_le_bytes()));
        push(&[1, 1 << 24, 4, 32]); // [1] int, 4 bytes, 32 bits
        push(&[5, (4 << 24) | 2, 8]); // [2] struct s, 2 members, 8 bytes
        push(&[7, 1, 0]); // a: int at bit 0
        push(&[9, 1, 32]); // b: int at bit 32
        let mut btf = vec![0x9f, 0xeb, 1, 0];
        for w in [24u32, 0, types.len() as u32, types.len() as u32, strings.len() as u32] {
            btf.extend(w.to_le_bytes());
        }
        btf.extend(types);
        btf.extend(strings);
        btf
    }

    #[test]
    fn finds_members_past_other_types() {
        let btf = tiny();
        assert_eq!(field_offset(&btf, "s", "b"), Some(4));
        assert_eq!(field_offset(&btf, "s", "a"), Some(0));
        assert_eq!(field_offset(&btf, "s", "c"), None);
        assert_eq!(field_offset(&btf, "t", "a"), None);
        assert_eq!(field_offset(&btf[..30], "s", "b"), None);
        assert_eq!(field_offset(b"nonsense", "s", "b"), None);
    }

    #[test]
    fn the_running_kernel_has_the_cgroup_walk() {
        let Ok(btf) = std::fs::read("/sys/kernel/btf/vmlinux") else { return };
        let path = super::cgroup_path(&btf).expect("task_struct.cgroups .. kernfs_node.id");
        // The first offset 0 means "not found" to the programs.
        assert!(path[0] > 0, "{path:?}");
    }

    #[test]
    fn the_running_kernel_has_task_struct_tgid() {
        let Ok(btf) = std::fs::read("/sys/kernel/btf/vmlinux") else { return };
        let tgid = field_offset(&btf, "task_struct", "tgid").expect("task_struct.tgid");
        let pid = field_offset(&btf, "task_struct", "pid").expect("task_struct.pid");
        // tgid follows pid in every kernel gpumem runs on.
        assert_eq!(tgid, pid + 4);
    }
}
