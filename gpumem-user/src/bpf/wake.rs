//! The idle marks: what an agent that stops its drain timer writes so that
//! the next record wakes it (gpumem-ebpf's base/records.rs, `wakeup`).
//!
//! Records are submitted without waking the agent, which drains the ring
//! on a timer. An agent that read nothing for a while marks every CPU's
//! `WAKE_AT` with `WAKE_IDLE` and stops that timer: each CPU's first record
//! after the mark wakes it, and it clears the marks and drains on its
//! timer again.
use aya::maps::{MapData, PerCpuArray, PerCpuValues};
use gpumem_common::{map_name, WAKE_IDLE};

use super::{error::BpfError, Tracer};

/// The programs' `WAKE_AT`, every CPU's look at the ring's backlog.
pub struct WakeMarks {
    map: PerCpuArray<MapData, u64>,
}

impl WakeMarks {
    pub fn take(tracer: &mut Tracer) -> Result<Self, BpfError> {
        Ok(Self { map: tracer.take_map(map_name::WAKE_AT)? })
    }

    /// Marks every CPU idle.
    pub fn mark(&mut self) -> Result<(), BpfError> {
        self.set_all(WAKE_IDLE)
    }

    /// Clears the marks: each CPU's next record looks at the backlog, as
    /// after a look long ago.
    pub fn clear(&mut self) -> Result<(), BpfError> {
        self.set_all(0)
    }

    /// Whether every CPU still holds the mark: a CPU whose program looked
    /// at the backlog while the marks were written (its look replaced the
    /// mark) has a record that may not have woken the agent.
    pub fn intact(&self) -> Result<bool, BpfError> {
        let values = self.map.get(&0, 0).map_err(map_err)?;
        Ok(values.iter().all(|&v| v == WAKE_IDLE))
    }

    fn set_all(&mut self, value: u64) -> Result<(), BpfError> {
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| {
            map_err(std::io::Error::new(e.kind(), format!("reading {what}: {e}")).into())
        })?;
        let values = PerCpuValues::try_from(vec![value; cpus]).map_err(|e| map_err(e.into()))?;
        self.map.set(0, values, 0).map_err(map_err)
    }
}

fn map_err(e: aya::maps::MapError) -> BpfError {
    BpfError::Map { name: map_name::WAKE_AT, source: Box::new(e) }
}
