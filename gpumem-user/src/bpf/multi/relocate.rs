//! The object's uprobe programs as the kernel must get them: the same
//! ELF aya loaded, parsed again by aya-obj and relocated the way aya does
//! it (the kernel's BTF, then the maps aya created, then calls between
//! functions), so that both loads share one set of maps.
use std::{
    collections::HashSet,
    os::fd::{AsFd, AsRawFd},
};

use aya::{maps::Map, Ebpf};
use aya_obj::{btf::Btf, generated::bpf_insn, Object};

use crate::bpf::error::BpfError;

fn failed(what: &str, e: impl std::fmt::Display) -> BpfError {
    BpfError::Multi(format!("{what}: {e}"))
}

/// The map's kernel object, whichever type it is.
pub fn data(map: &Map) -> &aya::maps::MapData {
    match map {
        Map::Array(m)
        | Map::ArrayOfMaps(m)
        | Map::BloomFilter(m)
        | Map::CgroupArray(m)
        | Map::CgroupStorage(m)
        | Map::CgrpStorage(m)
        | Map::CpuMap(m)
        | Map::DevMap(m)
        | Map::DevMapHash(m)
        | Map::HashMap(m)
        | Map::HashOfMaps(m)
        | Map::InodeStorage(m)
        | Map::LpmTrie(m)
        | Map::LruHashMap(m)
        | Map::PerCpuArray(m)
        | Map::PerCpuCgroupStorage(m)
        | Map::PerCpuHashMap(m)
        | Map::PerCpuLruHashMap(m)
        | Map::PerfEventArray(m)
        | Map::ProgramArray(m)
        | Map::Queue(m)
        | Map::ReusePortSockArray(m)
        | Map::RingBuf(m)
        | Map::SockHash(m)
        | Map::SockMap(m)
        | Map::SkStorage(m)
        | Map::Stack(m)
        | Map::StackTraceMap(m)
        | Map::Unsupported(m)
        | Map::XskMap(m) => m,
    }
}

/// `names`' instructions from `object`, relocated against `ebpf`'s maps
/// (every map of the object must still be in `ebpf`).
pub fn programs(
    object: &[u8],
    ebpf: &Ebpf,
    names: &[&'static str],
) -> Result<Vec<(&'static str, Vec<bpf_insn>)>, BpfError> {
    let mut obj = Object::parse(object).map_err(|e| failed("parsing the eBPF object", e))?;
    // Read and parsed only for an object that has CO-RE relocations:
    // gpumem's has none, and the parse took about 20 ms of every start.
    if has_core_relocations(object) {
        if let Ok(btf) = Btf::from_sys_fs() {
            obj.relocate_btf(&btf).map_err(|e| failed("relocating against the kernel's BTF", e))?;
        }
    }
    let mut fds = Vec::new();
    for name in obj.maps.keys() {
        let map =
            ebpf.map(name).ok_or_else(|| failed("relocating maps", format!("map `{name}` was taken")))?;
        fds.push((name.clone(), data(map).fd().as_fd().as_raw_fd()));
    }
    let text_sections: HashSet<usize> = obj.functions.keys().map(|(section, _)| *section).collect();
    let defs = obj.maps.clone();
    let maps = fds.iter().filter_map(|(name, fd)| Some((name.as_str(), *fd, defs.get(name)?)));
    obj.relocate_maps(maps, &text_sections).map_err(|e| failed("relocating maps", e))?;
    obj.relocate_calls(&text_sections).map_err(|e| failed("relocating calls", e))?;
    names
        .iter()
        .map(|&name| {
            let program = obj.programs.get(name).ok_or(BpfError::MissingProgram(name))?;
            let function =
                obj.functions.get(&program.function_key()).ok_or(BpfError::MissingProgram(name))?;
            Ok((name, function.instructions.clone()))
        })
        .collect()
}

/// Whether the ELF `object` carries CO-RE relocations: the length in its
/// `.BTF.ext` header (`core_relo_len`, at byte 28 of a header of 32 or
/// more bytes). An object that cannot be read says yes, so it is
/// relocated as before.
fn has_core_relocations(object: &[u8]) -> bool {
    use object::{Object as _, ObjectSection};
    let Ok(file) = object::File::parse(object) else { return true };
    let Some(ext) = file.section_by_name(".BTF.ext") else { return false };
    let Ok(data) = ext.data() else { return true };
    let word = |at: usize| data.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    match (word(4), word(28)) {
        (Some(header), Some(core_len)) if header >= 32 => core_len > 0,
        (Some(_), _) => false,
        (None, _) => true,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn gpumem_s_objects_have_no_core_relocations_and_a_header_s_length_is_read() {
        let object: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gpumem"));
        let with_log: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gpumem-log"));
        assert!(!super::has_core_relocations(object));
        assert!(!super::has_core_relocations(with_log));
        assert!(super::has_core_relocations(b"not an ELF"));
    }
}
