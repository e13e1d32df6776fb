//! What the integration tests of nicflow-ipsec share.

use std::io::Write;

/// Says why the test cannot run instead of passing silently (stderr, and
/// `$NICFLOW_SKIP_LOG` for scripts/test.sh's summary); a failure under
/// `NICFLOW_NO_SKIP`.
pub fn skipped(reason: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    eprintln!("skipped: {reason}");
    if let Ok(path) = std::env::var("NICFLOW_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let krate = env!("CARGO_CRATE_NAME");
            let _ = f.write_all(format!("{krate}::{test}: {reason}\n").as_bytes());
        }
    }
    if std::env::var_os("NICFLOW_NO_SKIP").is_some() {
        panic!("{test} would be skipped ({reason}) and NICFLOW_NO_SKIP is set");
    }
}

/// The IPv4 header checksum of `h`.
fn ip_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 packet (no options, DF clear, TTL 64) around `payload`.
pub fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let len = (20 + payload.len()) as u16;
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0];
    h[2..4].copy_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = ip_checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}
