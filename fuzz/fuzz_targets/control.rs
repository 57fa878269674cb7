//! A line on the control socket (any local client may write one): a
//! request or an error; and an answer as `gpumem status`/`top` read it. A
//! request that reads is written back and reads again.
#![no_main]
use gpumem::control::protocol::{Request, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = serde_json::from_slice::<Request>(data) {
        let again = serde_json::to_vec(&request).expect("a request that read writes");
        let back = serde_json::from_slice::<Request>(&again).expect("a written request reads back");
        assert_eq!(back, request);
    }
    let _ = serde_json::from_slice::<Response>(data);
});
