//! `BPF_MAP_TYPE_TASK_STORAGE`: a value per task, reached from the task
//! itself in about as long as an array lookup (the kernel keeps the value
//! on the `task_struct`, no hashing, no bucket walk). aya-ebpf 0.2 has no
//! type for it, so it is declared here as a BTF-defined map (the `.maps`
//! section, in the layout aya's own BTF maps use: each property a pointer
//! whose pointee's type carries the number) and created by aya's loader
//! with the value's BTF type, which the kernel requires of this map type.
//!
//! Only the task's own programs touch its value (the kernel frees it with
//! the task), so plain reads and writes suffice.
use core::ffi::c_void;

use aya_ebpf::{
    bindings::{bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE, BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE},
    helpers::generated::bpf_task_storage_get,
};

use crate::base::task::{on, Task};

/// The map's definition as BTF describes it; never read at run time.
#[repr(C)]
pub struct TaskStorage<V> {
    r#type: *const [i32; BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const V,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: the fields are placeholders for BTF, never dereferenced.
unsafe impl<V> Sync for TaskStorage<V> {}

impl<V> TaskStorage<V> {
    pub const fn new() -> Self {
        Self {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    /// The value of `task` (the current task's), created zeroed when it
    /// has none; None where task storage is not used (`TASK_CALLS_ON`) or
    /// the kernel gave none (out of memory, or another local-storage
    /// operation under way on this CPU: the get only tries the lock).
    #[inline(always)]
    pub fn current(&self, task: Task) -> Option<*mut V> {
        self.get(task, BPF_LOCAL_STORAGE_GET_F_CREATE as u64)
    }

    /// The value of `task` (the current task's) if it has one (None where
    /// task storage is not used).
    #[inline(always)]
    pub fn existing(&self, task: Task) -> Option<*mut V> {
        self.get(task, 0)
    }

    #[inline(always)]
    fn get(&self, task: Task, flags: u64) -> Option<*mut V> {
        if !on() {
            return None;
        }
        let map = core::ptr::from_ref(self).cast_mut().cast::<c_void>();
        // SAFETY: a helper call; the task pointer is the kernel's own, for
        // the current task (`Task::current`, which got it where task
        // storage is on), and the map pointer is relocated to the map.
        let p =
            unsafe { bpf_task_storage_get(map, task.ptr().cast_mut().cast(), core::ptr::null_mut(), flags) };
        (!p.is_null()).then_some(p.cast())
    }
}
