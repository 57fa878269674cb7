//! Device identity and the driver's own view, from the NVIDIA management
//! library (NVML, loaded at run time by nvml-wrapper): name, UUID, total
//! and used memory, and each process's usage as the driver reports it, to
//! show beside gpumem's. Without NVML (no NVIDIA driver, or the simulated
//! one) the agent says so once and reports devices by index only.
use nvml_wrapper::{enums::device::UsedGpuMemory, Nvml};

use crate::output::{DeviceInfo, DriverProcess};

pub struct Devices {
    nvml: Option<Nvml>,
}

impl Devices {
    /// Loads NVML; says so once when it cannot.
    pub fn open() -> Self {
        match Nvml::init() {
            Ok(nvml) => Self { nvml: Some(nvml) },
            Err(e) => {
                tracing::warn!(
                    "NVML is not available ({e}); devices are reported by index only, \
                     without names, UUIDs or the driver's own per-process usage"
                );
                Self { nvml: None }
            }
        }
    }

    pub fn available(&self) -> bool {
        self.nvml.is_some()
    }

    /// A device's memory and use (total, used), where NVML knows them.
    pub fn memory(&self, index: u32) -> Option<(u64, u64)> {
        let m = self.nvml.as_ref()?.device_by_index(index).ok()?.memory_info().ok()?;
        Some((m.total, m.used))
    }

    /// Every device NVML knows; empty without NVML. A field NVML cannot
    /// give is `None`, never a guess.
    pub fn snapshot(&self) -> Vec<DeviceInfo> {
        let Some(nvml) = &self.nvml else { return Vec::new() };
        let count = nvml.device_count().unwrap_or(0);
        (0..count)
            .filter_map(|index| {
                let d = nvml.device_by_index(index).ok()?;
                let mem = d.memory_info().ok();
                let processes = d
                    .running_compute_processes()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| DriverProcess {
                        pid: p.pid,
                        used_bytes: match p.used_gpu_memory {
                            UsedGpuMemory::Used(b) => Some(b),
                            UsedGpuMemory::Unavailable => None,
                        },
                    })
                    .collect();
                Some(DeviceInfo {
                    index,
                    name: d.name().ok(),
                    uuid: d.uuid().ok(),
                    total_bytes: mem.as_ref().map(|m| m.total),
                    used_bytes: mem.as_ref().map(|m| m.used),
                    processes,
                })
            })
            .collect()
    }
}
