//! Any text through the rule parser; whatever parses must print and parse
//! back to the same rule.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    nicflow_ofctl::fuzz_rule(data);
});
