//! Rough per-packet cost of the interpreter (run with `--ignored
//! --nocapture`, preferably in release).

mod interp_support;
use interp_support::load;
use nicflow_p4::runtime::{EntrySpec, KeyMatch};
use num_bigint::BigUint;

#[test]
#[ignore]
fn routing_packets_per_second() {
    let Some(mut p) = load("pna/routing.p4") else {
        return;
    };
    for i in 0..64u32 {
        p.table_add(
            "fib_table",
            EntrySpec {
                keys: vec![KeyMatch::Lpm(BigUint::from(0x0a000000u32 + (i << 16)), 16)],
                action: "set_nhid".into(),
                params: vec![("index".into(), BigUint::from(1u8))],
                priority: None,
            },
        )
        .unwrap();
    }
    p.table_add(
        "nh_table",
        EntrySpec {
            keys: vec![KeyMatch::Exact(BigUint::from(1u8))],
            action: "set_nh".into(),
            params: vec![
                ("dmac".into(), BigUint::from(1u8)),
                ("port".into(), BigUint::from(1u8)),
            ],
            priority: None,
        },
    )
    .unwrap();
    let mut pkt: Vec<u8> = (0..42u8).collect();
    pkt[12] = 8;
    pkt[13] = 0;
    pkt[14] = 0x45;
    pkt[22] = 64;
    pkt[30] = 10;
    pkt[31] = 5;
    let n = 20_000;
    let t0 = std::time::Instant::now();
    let mut sent = 0;
    for i in 0..n {
        let o = p.process(0, &pkt, i);
        sent += o.outputs.len();
    }
    let dt = t0.elapsed();
    println!(
        "{n} packets in {dt:?}: {:.0} pps, {} sent",
        n as f64 / dt.as_secs_f64(),
        sent
    );
}
