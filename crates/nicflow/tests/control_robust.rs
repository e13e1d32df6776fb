//! The control socket cannot stall forwarding. The daemon forwards and
//! serves the CLI on one thread; before `control::clients`, each connection
//! was served with a blocking 2 s read and an unbounded `read_line`, so a
//! client that connected and said nothing stopped the switch for 2 s, and
//! one that sent a huge line grew the daemon's memory without limit.
//!
//! Here, while ten clients hold connections open in silence and one sends
//! 100 MB without a newline, ping through the userspace path (offload off:
//! every packet goes through the daemon) must keep its round-trip time and
//! lose nothing, the CLI must keep answering, and the daemon's resident
//! memory must stay within the request limit of where it started. Needs
//! root; namespaces `nfcr<pid>-*`, removed by the lab's guard.

mod common;
use common::{lab_possible, NsLab};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Round-trip times (ms) of `n` pings from h1 to h2, 20 ms apart; panics
/// on loss.
fn rtts(lab: &NsLab, n: usize) -> Vec<f64> {
    let out = lab.must(
        "h1",
        &[
            "ping",
            "-n",
            "-c",
            &n.to_string(),
            "-i",
            "0.02",
            "-W",
            "1",
            "198.18.0.2",
        ],
    );
    let mut v: Vec<f64> = out
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(v.len(), n, "pings lost:\n{out}");
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

#[test]
fn silent_and_flooding_clients_do_not_stall_forwarding() {
    if !lab_possible() {
        return;
    }
    let mut lab = NsLab::new("nfcr", "", &["sw", "h1", "h2"]);
    lab.veth("p1", "sw", "eth0", "h1");
    lab.veth("p2", "sw", "eth0", "h2");
    lab.must("h1", &["ip", "addr", "add", "198.18.0.1/24", "dev", "eth0"]);
    lab.must("h2", &["ip", "addr", "add", "198.18.0.2/24", "dev", "eth0"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    lab.cli(&["set", "br0", "offload=none"]).unwrap();
    lab.cli(&["add-port", "br0", "p1"]).unwrap();
    lab.cli(&["add-port", "br0", "p2"]).unwrap();
    lab.ping("h1", "198.18.0.2").unwrap();
    let pid = lab.daemon_pid().unwrap();

    let quiet = rtts(&lab, 50);
    let rss0 = common::rss_kib(pid);

    // Ten silent clients, held open for the whole measurement.
    let silent: Vec<UnixStream> = (0..10)
        .map(|_| UnixStream::connect(lab.sock()).expect("connect"))
        .collect();
    // One client streaming 100 MB without a newline.
    let sock = lab.sock();
    let flood = std::thread::spawn(move || {
        let mut s = UnixStream::connect(sock).expect("connect");
        let chunk = vec![b'x'; 1 << 20];
        let mut sent = 0usize;
        for _ in 0..100 {
            match s.write_all(&chunk) {
                Ok(()) => sent += chunk.len(),
                // Refused once over the limit: the daemon closed its side.
                Err(_) => break,
            }
        }
        sent
    });
    std::thread::sleep(Duration::from_millis(100));
    let loaded = rtts(&lab, 50);
    // The CLI answers promptly meanwhile.
    let t0 = Instant::now();
    lab.cli(&["show"]).unwrap();
    let show = t0.elapsed();
    let sent = flood.join().unwrap();
    let rss1 = common::rss_kib(pid);
    drop(silent);

    let med = |v: &[f64]| v[v.len() / 2];
    let max = |v: &[f64]| v[v.len() - 1];
    eprintln!(
        "ping ms quiet: median {:.3} max {:.3}; with clients: median {:.3} max {:.3}; \
         show {show:?}; flood sent {} MB; RSS {rss0} -> {rss1} KiB",
        med(&quiet),
        max(&quiet),
        med(&loaded),
        max(&loaded),
        sent >> 20
    );
    // Before the fix a silent client held the loop for 2 s per connection.
    assert!(
        max(&loaded) < 500.0,
        "a ping took {:.1} ms while clients were connected",
        max(&loaded)
    );
    assert!(
        med(&loaded) < med(&quiet) + 20.0,
        "median RTT {:.3} ms with clients vs {:.3} ms without",
        med(&loaded),
        med(&quiet)
    );
    assert!(show < Duration::from_secs(2), "show took {show:?}");
    // Bounded by the request limit (32 MiB) plus slack, not by the 100 MB.
    assert!(
        rss1 < rss0 + 48 * 1024,
        "daemon RSS grew from {rss0} to {rss1} KiB"
    );
    // The switch is still fine.
    lab.ping("h1", "198.18.0.2").unwrap();
    assert!(
        lab.daemon_log().contains("too large"),
        "{}",
        lab.daemon_log()
    );
}
