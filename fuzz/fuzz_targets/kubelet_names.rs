//! The kubelet's directory and log names (/var/log/pods/NS_POD_UID,
//! /var/log/containers/POD_NS_CTR-ID.log): a pod and container, or none.
#![no_main]
use gpumem::enrich::pods::{parse_container_log, parse_pod_dir};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(name) = std::str::from_utf8(data) else { return };
    if let Some(dir) = parse_pod_dir(name) {
        assert!(name.contains(&dir.pod) && name.contains(&dir.namespace), "{name:?}: {dir:?}");
    }
    if let Some(log) = parse_container_log(name) {
        assert!(name.contains(&log.container) && name.contains(&log.id), "{name:?}: {log:?}");
    }
});
