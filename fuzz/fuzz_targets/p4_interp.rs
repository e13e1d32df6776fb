//! Any byte string as a packet through p4c's test programs (the corpus
//! beside the project, ../shared/p4-corpus, or $NICFLOW_P4_CORPUS), with
//! their STF entries loaded: the interpreter and the megaflow derivation
//! may drop a packet, never panic. The first byte picks the program and
//! the input port.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::{Mutex, OnceLock};

const PROGRAMS: &[(&str, &str)] = &[
    ("pna/routing.p4", "pna/routing.stf"),
    ("pna/ipip.p4", "pna/ipip_encap.stf"),
    ("pna/calc_128.p4", "pna/calc_128.stf"),
    ("pna/arp_respond.p4", "pna/arp_respond.stf"),
    ("v1model/checksum-l4-bmv2.p4", "v1model/checksum-l4-bmv2.stf"),
    ("v1model/ternary2-bmv2.p4", "v1model/ternary2-bmv2.stf"),
    ("psa/psa-recirculate-no-meta-bmv2.p4", "psa/psa-recirculate-no-meta-bmv2.stf"),
    ("psa/psa-register-read-write-2-bmv2.p4", "psa/psa-register-read-write-2-bmv2.stf"),
    ("v1model/v1model-special-ops-bmv2.p4", "v1model/v1model-special-ops-bmv2.stf"),
    ("pna/pna-dpdk-add_on_miss0.p4", ""),
    ("netronome/ipv6_forward.p4", ""),
];

fn pipelines() -> &'static Mutex<Vec<nicflow_p4::Pipeline>> {
    static P: OnceLock<Mutex<Vec<nicflow_p4::Pipeline>>> = OnceLock::new();
    P.get_or_init(|| {
        let dir = std::env::var("NICFLOW_P4_CORPUS")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|_| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/p4-corpus")
            });
        let inc = vec![dir.join("include")];
        let mut v = Vec::new();
        for (prog, stf) in PROGRAMS {
            let mut p = nicflow_p4::Pipeline::load(&dir.join(prog), &inc, None)
                .unwrap_or_else(|e| panic!("corpus program {prog}: {e}"));
            let text = if stf.is_empty() {
                String::new()
            } else {
                std::fs::read_to_string(dir.join(stf)).expect("corpus STF")
            };
            let mut pre = nicflow_p4::stf::Replication::default();
            for (_, cmd) in nicflow_p4::stf::parse(stf, &text).expect("STF").commands {
                let _ = nicflow_p4::stf::apply_to(&mut p, &mut pre, &cmd);
            }
            v.push(p);
        }
        Mutex::new(v)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, pkt)) = data.split_first() else {
        return;
    };
    let mut all = pipelines().lock().unwrap();
    let n = all.len();
    let p = &mut all[sel as usize % n];
    let out = p.process(u32::from(sel >> 4), pkt, 0);
    let mut key = nicflow_flow::FlowKey::default();
    if let Ok(layout) = nicflow_flow::extract(pkt, 1, &mut key) {
        let reads: Vec<(u32, u32)> = out.trace.read_bits.iter().map(|r| (r.offset, r.len)).collect();
        let emitted: Vec<(u32, u32, Option<u32>)> =
            out.trace.emitted.iter().map(|e| (e.out, e.len, e.from)).collect();
        let d = nicflow_dataplane::p4::megaflow::Decision {
            reads: &reads,
            in_port_read: out.trace.in_port_read,
            outputs: &out.outputs,
            emitted: &emitted,
            min_len: out.trace.min_packet_len,
        };
        let _ = nicflow_dataplane::p4::megaflow::derive(&key, pkt, &layout, &d);
    }
});
