use gpumem_common::{id, kind, record};
use proptest::prelude::*;

use super::*;

fn header(event: u32) -> Header {
    Header {
        ts_ns: 5,
        pid_tgid: (42u64 << 32) | 43,
        cgroup_id: 9,
        comm: *b"python3\0\0\0\0\0\0\0\0\0",
        event,
        api: id::MEM_ALLOC_V2,
    }
}

fn bytes<P: bytemuck::Pod>(h: Header, p: P) -> Vec<u8> {
    [bytemuck::bytes_of(&h), bytemuck::bytes_of(&p)].concat()
}

#[test]
fn an_alloc_record_decodes_with_its_origin_and_change() {
    let c = record::Change {
        addr: 0x7f00_0000_1000,
        size: 4096,
        proc_total: 4096,
        cgroup_total: 8192,
        generation: 3,
        result: 0,
        kind: kind::DEVICE,
        device: 1,
        flags: 0,
    };
    let e = decode(&bytes(header(event_type::ALLOC), c)).unwrap();
    assert_eq!(
        e.origin,
        Origin { ts_ns: 5, pid: 42, tid: 43, cgroup_id: 9, comm: "python3".into(), api: id::MEM_ALLOC_V2 }
    );
    let Body::Alloc(got) = e.body else { panic!("not an alloc: {e:?}") };
    assert_eq!((got.addr, got.size, got.device, got.generation), (0x7f00_0000_1000, 4096, Some(1), 3));
    assert!(!got.untracked && !got.cgroup_slots_full);
}

#[test]
fn flags_and_an_unknown_device_are_typed() {
    let c = record::Change { device: DEVICE_UNKNOWN, flags: FLAG_UNTRACKED, result: 1, ..Default::default() };
    let Body::Free(got) = decode(&bytes(header(event_type::FREE), c)).unwrap().body else { panic!() };
    assert_eq!((got.device, got.result), (None, Some(1)));
    assert!(got.untracked);
    let c = record::Change { flags: FLAG_AT_ENTRY | FLAG_UNTRACKED, ..Default::default() };
    let Body::Free(got) = decode(&bytes(header(event_type::FREE), c)).unwrap().body else { panic!() };
    assert_eq!(got.result, None, "recorded at its entry: no result known");
    assert!(got.untracked);
}

#[test]
fn releases_and_decisions_have_payloads_of_their_own() {
    let r = record::Release { size: 30, cgroup_total: 5, generation: 7 };
    let e = decode(&bytes(header(event_type::EXIT), r)).unwrap();
    assert_eq!(e.body, Body::Exit(Release { size: 30, cgroup_total: 5, generation: 7 }));
    let d = record::Decision {
        request: 3,
        usage: 9,
        limit: 10,
        slot: 2,
        action: limit_action::SIGNAL,
        signal: 9,
        _pad: 0,
    };
    let e = decode(&bytes(header(event_type::LIMIT), d)).unwrap();
    let want = Decision { slot: 2, request: 3, usage: 9, limit: 10, taken: Taken::Signal(9) };
    assert_eq!(e.body, Body::Limit(want));
}

#[test]
fn wrong_lengths_and_kinds_are_errors() {
    let r = record::Release::default();
    assert_eq!(decode(&[0; 10]), Err(DecodeError::Short(10)));
    assert!(matches!(decode(&bytes(header(event_type::ALLOC), r)), Err(DecodeError::Length { .. })));
    assert_eq!(decode(&bytes(header(99), r)), Err(DecodeError::UnknownEvent(99)));
    let mut long = bytes(header(event_type::EXIT), r);
    long.push(0);
    assert!(matches!(decode(&long), Err(DecodeError::Length { event: "exit", .. })));
}

#[test]
fn comm_stops_at_nul() {
    assert_eq!(comm(b"python3\0garbage\0"), "python3");
    assert_eq!(comm(b"0123456789abcdef"), "0123456789abcdef");
}

proptest! {
    /// Whatever the bytes, decoding answers without panicking, and a
    /// record decodes only at its kind's exact length.
    #[test]
    fn any_bytes_decode_or_are_refused(raw in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(e) = decode(&raw) {
            let h: Header = bytemuck::pod_read_unaligned(&raw[..size_of::<Header>()]);
            prop_assert_eq!(Some(raw.len() - size_of::<Header>()), payload_size(h.event));
            prop_assert_eq!(e.origin.pid, h.tgid());
        }
    }

    /// A record the kernel could send decodes to what it says.
    #[test]
    fn changes_round_trip(addr: u64, size: u64, device: u32, flags in 0u32..8, result: u32, event in 1u32..4) {
        let c = record::Change { addr, size, device, flags, result, ..Default::default() };
        let e = decode(&bytes(header(event), c)).unwrap();
        let (Body::Alloc(got) | Body::Free(got) | Body::AllocFailed(got)) = e.body else {
            return Err(TestCaseError::fail(format!("{e:?}")));
        };
        prop_assert_eq!((got.addr, got.size), (addr, size));
        prop_assert_eq!(got.device, (device != DEVICE_UNKNOWN).then_some(device));
        prop_assert_eq!(got.untracked, flags & FLAG_UNTRACKED != 0);
        prop_assert_eq!(got.result, (flags & FLAG_AT_ENTRY == 0).then_some(result));
    }
}
