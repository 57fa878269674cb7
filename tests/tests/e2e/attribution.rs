//! Who holds the memory: the container and pod a cgroup path names (by
//! name, from the kubelet's log directories), and the process's
//! executable and command line.
use gpumem::{enrich::container::Container, output::RecordEvent};
use gpumem_tests::harness::*;

const ID: &str = "9c0ffee0123456789abcdef0123456789abcdef0123456789abcdef012345678";
const UID: &str = "1a2b3c4d-5e6f-4081-92a3-b4c5d6e7f809";
const NAMESPACE: &str = "gpumem-test";
const POD: &str = "trainer-5f7c9-x2x4q";
const NAME: &str = "pytorch";

#[test]
fn records_name_the_pod_container_and_process() {
    if !privileged() {
        return;
    }
    let _kubelet = KubeletLogs::make((NAMESPACE, POD, UID), NAME, ID);
    let agent = Agent::start(&[]);
    let pod = format!("kubepods-burstable-pod{}.slice", UID.replace('-', "_"));
    let container = format!("cri-containerd-{ID}.scope");
    let cg = Cgroup::create_nested("pod", &["kubepods.slice", "kubepods-burstable.slice", &pod, &container]);
    let mut w = Workload::spawn(&["--scenario", "basic", "--pause"], Some(&cg), &[]);
    let pid = w.pid();
    let c = w.checkpoint();
    let lines = agent.wait_for_checkpoint(&c);
    let alloc = lines.events(pid, RecordEvent::Alloc)[0];
    assert_eq!(alloc.caller.cgroup.as_deref(), Some(cg.path.as_str()));
    let container = Container {
        runtime: "containerd".into(),
        id: ID.into(),
        pod_uid: Some(UID.into()),
        qos: Some("burstable".into()),
        namespace: Some(NAMESPACE.into()),
        pod: Some(POD.into()),
        name: Some(NAME.into()),
    };
    assert_eq!(alloc.container, Some(std::sync::Arc::new(container)));
    let s = agent.status();
    let p = proc_entry(&s, pid).unwrap();
    assert!(p.exe.as_deref().is_some_and(|e| e.ends_with("/gpumem-workload")), "{p:?}");
    assert!(p.cmdline.as_deref().is_some_and(|c| c.contains("--scenario basic --pause")), "{p:?}");
    assert_eq!(p.container.as_ref().map(|c| c.id.as_str()), Some(ID));
    let cgroup = cgroup_entry(&s, cg.id).unwrap();
    assert_eq!(cgroup.container.as_ref().and_then(|c| c.pod_uid.as_deref()), Some(UID));
    w.run_to_end();
}
