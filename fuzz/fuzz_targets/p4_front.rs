//! Any text as a P4-16 program (with the architecture includes of the
//! corpus reachable): the preprocessor, parser and checker may refuse it
//! with file:line, never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let inc = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/p4-corpus/include")];
    let _ = nicflow_p4::source::load_source("fuzz.p4", text, &inc, None);
});
