//! Random packets into every corpus program: process() never panics and
//! never runs away (loop and recirculation bounds).

mod interp_support;
use interp_support::corpus;
use nicflow_p4::Pipeline;
use proptest::prelude::*;

fn programs() -> Vec<std::path::PathBuf> {
    let Some(c) = corpus() else { return vec![] };
    let mut out = Vec::new();
    for d in ["pna", "v1model", "psa", "netronome"] {
        if let Ok(rd) = std::fs::read_dir(c.join(d)) {
            for e in rd.flatten() {
                let p = e.path();
                if p.extension().map(|x| x == "p4").unwrap_or(false) {
                    out.push(p);
                }
            }
        }
    }
    out.sort();
    out
}

fn pipelines() -> Vec<(String, Pipeline)> {
    let Some(c) = corpus() else { return vec![] };
    let inc = vec![c.join("include")];
    let mut out = Vec::new();
    for p in programs() {
        match Pipeline::load(&p, &inc, None) {
            Ok(pl) => out.push((p.display().to_string(), pl)),
            Err(e) => eprintln!("not loaded: {}: {e}", p.display()),
        }
    }
    out
}

#[test]
fn every_corpus_program_loads_or_is_refused_with_a_location() {
    let Some(c) = corpus() else { return };
    let inc = vec![c.join("include")];
    for p in programs() {
        if let Err(e) = Pipeline::load(&p, &inc, None) {
            let m = e.to_string();
            assert!(
                m.contains(".p4:"),
                "{}: refusal without location: {m}",
                p.display()
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]
    #[test]
    fn random_packets_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..160),
        port in 0u32..8,
        prefix in 0usize..4,
    ) {
        // Bias some packets towards valid Ethernet/IPv4 prefixes.
        let mut pkt = bytes;
        if prefix == 1 && pkt.len() > 14 {
            pkt[12] = 0x08;
            pkt[13] = 0x00;
            pkt[14] = 0x45;
        }
        for (_, mut p) in pipelines() {
            let _ = p.process(port, &pkt, 1);
        }
    }
}
