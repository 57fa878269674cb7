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
fn data(map: &Map) -> &aya::maps::MapData {
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
    if let Ok(btf) = Btf::from_sys_fs() {
        obj.relocate_btf(&btf).map_err(|e| failed("relocating against the kernel's BTF", e))?;
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
