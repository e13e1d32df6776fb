//! Any byte string through the frame parser, the views, the rewrites and
//! flow key extraction: nothing may panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    nicflow_packet::fuzz_parse(data);
    let mut key = nicflow_flow::FlowKey::default();
    let _ = nicflow_flow::extract(data, 1, &mut key);
});
