//! Rough per-packet cost of the interpreter (run with `--ignored
//! --nocapture`, preferably in release).

mod interp_support;
use interp_support::{add_routes, load};

#[test]
#[ignore]
fn routing_packets_per_second() {
    let Some(mut p) = load("pna/routing.p4") else {
        return;
    };
    // 64 /16 routes in 10/8 -> next hop 1 -> port 1.
    let routes: Vec<(u32, u32)> = (0..64u32).map(|i| (0x0a00_0000 + (i << 16), 16)).collect();
    add_routes(&mut p, &routes, 1);
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
