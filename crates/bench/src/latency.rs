//! Request/response latency between two lab hosts with sockperf.
//!
//! An experiment calls [`ping_pong`] with a testbed's client and server
//! namespaces while no other traffic runs (or beside it, to see latency
//! under load): a `sockperf server` in the server's namespace, a
//! `sockperf ping-pong` client in the client's, one message in flight at a
//! time. sockperf prints percentiles of its observations; we keep p50, p99
//! and p99.9 (tails, not means: a switch that batches or sleeps shows up in
//! the tail first). sockperf 3.7 reports each observation as half the round
//! trip ("avg-lat"); newer builds with `--full-rtt` print "avg-rtt". Either
//! way [`Latency`] holds full round trips in µs.

use anyhow::{bail, Context};
use nicflow::lab::sys;
use serde::{Deserialize, Serialize};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Round-trip percentiles of one sockperf run, µs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub observations: u64,
    pub command: String,
}

/// Parse sockperf ping-pong output (stdout and stderr together).
pub fn parse_sockperf(text: &str) -> anyhow::Result<Latency> {
    // 3.7 prints half round trips (avg-lat); `--full-rtt` prints avg-rtt.
    let factor = if text.contains("avg-rtt") { 1.0 } else { 2.0 };
    let mut l = Latency::default();
    let (mut p50, mut p99, mut p999) = (None, None, None);
    for line in text.lines() {
        let Some((k, v)) = line
            .split_once("--->")
            .map(|(_, r)| r)
            .and_then(|r| r.split_once('='))
        else {
            if let Some(rest) = line.split("Total ").nth(1) {
                if let Some(n) = rest.split_whitespace().next() {
                    if rest.contains("observations") {
                        l.observations = n.parse().unwrap_or(0);
                    }
                }
            }
            continue;
        };
        let Ok(v) = v.trim().parse::<f64>() else {
            continue;
        };
        let k = k.trim();
        if k.contains("<MAX>") {
            l.max_us = v * factor;
        } else if let Some(p) = k.strip_prefix("percentile") {
            match p.trim() {
                "50.000" => p50 = Some(v * factor),
                "99.000" => p99 = Some(v * factor),
                "99.900" => p999 = Some(v * factor),
                _ => {}
            }
        }
    }
    match (p50, p99, p999) {
        (Some(a), Some(b), Some(c)) => {
            (l.p50_us, l.p99_us, l.p999_us) = (a, b, c);
            Ok(l)
        }
        _ => bail!("no percentiles in sockperf output"),
    }
}

/// UDP ping-pong from `client_ns` to `server_ip:port` in `server_ns` for
/// `seconds`, `msg_size`-byte messages.
pub fn ping_pong(
    client_ns: &str,
    server_ns: &str,
    server_ip: &str,
    port: u16,
    seconds: u64,
    msg_size: usize,
) -> anyhow::Result<Latency> {
    let port_s = port.to_string();
    let mut server = sys::in_ns(
        Some(server_ns),
        &["sockperf", "server", "-i", server_ip, "-p", &port_s],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .context("starting sockperf server")?;
    // sockperf binds at once; give it a moment, then the client retries
    // nothing, so wait for the UDP socket to show up.
    let ready = Instant::now() + Duration::from_secs(3);
    let filter = format!("sport = :{port}");
    while Instant::now() < ready {
        let up = sys::run(&mut sys::in_ns(Some(server_ns), &["ss", "-Hlun", &filter]))
            .map(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
            .unwrap_or(false);
        if up {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let secs = seconds.to_string();
    let size = msg_size.to_string();
    let argv = [
        "sockperf",
        "ping-pong",
        "-i",
        server_ip,
        "-p",
        &port_s,
        "-t",
        &secs,
        "-m",
        &size,
    ];
    let command = format!("ip netns exec {client_ns} {}", argv.join(" "));
    let out = sys::in_ns(Some(client_ns), &argv)
        .stdin(Stdio::null())
        .output();
    let _ = server.kill();
    let _ = server.wait();
    let out = out.context("running sockperf ping-pong")?;
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut l = parse_sockperf(&text).with_context(|| format!("`{command}`"))?;
    l.command = command;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT_37: &str = "sockperf: == version #3.7-no.git ==
sockperf[CLIENT] send on:sockperf: using recvfrom() to block on socket(s)
[ 0] IP = 198.18.2.1      PORT = 11111 # UDP
sockperf: Warmup stage (sending a few dummy messages)...
sockperf: Starting test...
sockperf: Test end (interrupted by timer)
sockperf: Test ended
sockperf: [Total Run] RunTime=2.000 sec; Warm up time=400 msec; SentMessages=40464; ReceivedMessages=40463
sockperf: ========= Printing statistics for Server No: 0
sockperf: [Valid Duration] RunTime=1.550 sec; SentMessages=29630; ReceivedMessages=29630
sockperf: ====> avg-lat= 20.771 (std-dev=5.266)
sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0
sockperf: Summary: Latency is 20.771 usec
sockperf: Total 29630 observations; each percentile contains 296.30 observations
sockperf: ---> <MAX> observation =  120.108
sockperf: ---> percentile 99.999 =  106.349
sockperf: ---> percentile 99.990 =   63.772
sockperf: ---> percentile 99.900 =   55.940
sockperf: ---> percentile 99.000 =   48.619
sockperf: ---> percentile 90.000 =   24.295
sockperf: ---> percentile 75.000 =   20.358
sockperf: ---> percentile 50.000 =   19.279
sockperf: ---> percentile 25.000 =   18.641
sockperf: ---> <MIN> observation =   16.748
";

    #[test]
    fn percentiles_are_round_trips() {
        let l = parse_sockperf(OUT_37).unwrap();
        assert!((l.p50_us - 38.558).abs() < 1e-9);
        assert!((l.p99_us - 97.238).abs() < 1e-9);
        assert!((l.p999_us - 111.88).abs() < 1e-9);
        assert!((l.max_us - 240.216).abs() < 1e-9);
        assert_eq!(l.observations, 29630);
    }

    #[test]
    fn full_rtt_output_is_not_doubled() {
        let t = OUT_37.replace("avg-lat", "avg-rtt");
        let l = parse_sockperf(&t).unwrap();
        assert!((l.p50_us - 19.279).abs() < 1e-9);
    }

    #[test]
    fn no_percentiles_is_an_error() {
        assert!(parse_sockperf("sockperf: ERROR: connection refused").is_err());
    }
}
