//! Interop with an independent ESP implementation: scapy's (over the
//! `cryptography` package), driven by `tests/scapy/esp_scapy.py`.
//!
//! Unit tests can only show that nicflow agrees with itself; a wrong nonce
//! layout, AAD or padding rule would round-trip perfectly and still fail
//! against every real peer. So each direction is checked here: nicflow
//! opens what scapy seals and scapy opens what nicflow seals, in transport
//! mode (IPv4/UDP, next header 17) and tunnel mode (a whole inner IPv4
//! packet, next header 4), for both key sizes, with and without ESN
//! (crossing the 2^32 boundary, where the high half exists only in the
//! AAD). Scapy picks random IVs, so its packets also show that `open`
//! takes the IV from the wire rather than assuming it equals the sequence
//! number.

use std::io::Write;
mod common;

use common::{ipv4, skipped};
use std::process::{Command, Stdio};

use nicflow_ipsec::esp::{Aead, EspDrop, InboundSa, OutboundSa, SaConfig, IPPROTO_ESP};

const SPI: u32 = 0x0000_1001;
const OUTER_SRC: [u8; 4] = [198, 18, 0, 1];
const OUTER_DST: [u8; 4] = [198, 18, 0, 2];

fn python() -> &'static str {
    // Debian's python3-scapy lives under the system interpreter, which a
    // pyenv or venv python3 earlier on PATH would not see.
    if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

fn have_scapy() -> bool {
    Command::new(python())
        .args([
            "-c",
            "import scapy.layers.ipsec, cryptography.hazmat.primitives.ciphers.aead",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// An inner IPv4/UDP packet with `n` payload bytes (UDP checksum 0, which
/// IPv4 allows).
fn udp_packet(n: usize) -> Vec<u8> {
    let mut u = vec![0x30, 0x39, 0x12, 0xb5, 0, 0, 0, 0];
    u[4..6].copy_from_slice(&((8 + n) as u16).to_be_bytes());
    u.extend((0..n).map(|i| (i * 13 + 5) as u8));
    ipv4([10, 0, 0, 1], [10, 0, 0, 2], 17, &u)
}

const SIZES: [usize; 7] = [0, 1, 2, 3, 5, 100, 1400];

fn key(aead: Aead) -> Vec<u8> {
    (0..aead.key_material_len() as u8)
        .map(|i| i.wrapping_mul(29).wrapping_add(3))
        .collect()
}

fn cfg(aead: Aead, esn: bool) -> SaConfig {
    SaConfig {
        esn,
        ..SaConfig::new(SPI, aead, key(aead))
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Transport,
    Tunnel,
}

struct Pkt {
    seq: u64,
    data: Vec<u8>,
}

fn request(op: &str, aead: Aead, mode: Mode, esn: bool, pkts: &[Pkt]) -> String {
    let packets: Vec<String> = pkts
        .iter()
        .map(|p| {
            format!(
                r#"{{"seq": {}, "esn": {}, "data": "{}"}}"#,
                p.seq as u32,
                p.seq >> 32,
                hex(&p.data)
            )
        })
        .collect();
    format!(
        r#"{{"op": "{op}", "spi": {SPI}, "key": "{}", "mode": "{}", "src": "198.18.0.1", "dst": "198.18.0.2", "esn_en": {esn}, "packets": [{}]}}"#,
        hex(&key(aead)),
        if mode == Mode::Tunnel {
            "tunnel"
        } else {
            "transport"
        },
        packets.join(", ")
    )
}

/// Runs the helper on a list of requests; one verdict per packet.
fn scapy(requests: &[String]) -> Vec<Result<Vec<u8>, String>> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scapy/esp_scapy.py");
    let mut child = Command::new(python())
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the scapy helper");
    let input = format!("[{}]", requests.join(", "));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "scapy helper failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| match l.split_once(' ') {
            Some(("ok", h)) => Ok(unhex(h)),
            _ => Err(l.to_string()),
        })
        .collect()
}

/// The ESP part of an outer IPv4 packet (checks it is ESP).
fn esp_of(outer: &[u8]) -> Vec<u8> {
    let ihl = usize::from(outer[0] & 0x0f) * 4;
    assert_eq!(outer[9], IPPROTO_ESP, "outer protocol");
    outer[ihl..].to_vec()
}

/// What nicflow protects in each mode: the IP payload (next header 17) or
/// the whole inner packet (next header 4).
fn protected(mode: Mode, inner: &[u8]) -> (u8, Vec<u8>) {
    match mode {
        Mode::Transport => (17, inner[20..].to_vec()),
        Mode::Tunnel => (4, inner.to_vec()),
    }
}

/// The outer packet nicflow would send: in transport mode the inner
/// packet's own addresses, in tunnel mode the tunnel endpoints.
fn outer_for(mode: Mode, inner: &[u8], esp: &[u8]) -> Vec<u8> {
    match mode {
        Mode::Transport => {
            let src: [u8; 4] = inner[12..16].try_into().unwrap();
            let dst: [u8; 4] = inner[16..20].try_into().unwrap();
            ipv4(src, dst, IPPROTO_ESP, esp)
        }
        Mode::Tunnel => ipv4(OUTER_SRC, OUTER_DST, IPPROTO_ESP, esp),
    }
}

const CASES: [(Aead, Mode); 4] = [
    (Aead::AesGcm128, Mode::Transport),
    (Aead::AesGcm128, Mode::Tunnel),
    (Aead::AesGcm256, Mode::Transport),
    (Aead::AesGcm256, Mode::Tunnel),
];

/// Sequence numbers for ESN runs: a realistic progression from epoch 0
/// into epoch 1, with one late packet from epoch 0 arriving after the
/// receiver crossed over, and 2^32 itself (low half 0).
const ESN_SEQS: [u64; 7] = [
    1,
    0x8000_0000,
    0xFFFF_FFF0,
    0x1_0000_0005,
    0xFFFF_FFE0,
    0x1_0000_0000,
    0x1_0000_0006,
];

#[test]
fn nicflow_opens_what_scapy_seals() {
    if !have_scapy() {
        return skipped("python3 with scapy (and cryptography) not found");
    }
    let mut reqs = Vec::new();
    let mut expect = Vec::new();
    for esn in [false, true] {
        for (aead, mode) in CASES {
            let seqs: Vec<u64> = if esn {
                ESN_SEQS.to_vec()
            } else {
                (1..=SIZES.len() as u64).collect()
            };
            let pkts: Vec<Pkt> = seqs
                .iter()
                .enumerate()
                .map(|(i, &seq)| Pkt {
                    seq,
                    data: udp_packet(SIZES[i % SIZES.len()]),
                })
                .collect();
            reqs.push(request("seal", aead, mode, esn, &pkts));
            expect.push((aead, mode, esn, pkts));
        }
    }
    let mut verdicts = scapy(&reqs).into_iter();
    for (aead, mode, esn, pkts) in expect {
        let mut inb = InboundSa::new(cfg(aead, esn)).unwrap();
        for p in pkts {
            let what = format!("{aead} {mode:?} esn={esn} seq={:#x}", p.seq);
            let outer = verdicts
                .next()
                .expect("a verdict per packet")
                .unwrap_or_else(|e| panic!("scapy could not seal {what}: {e}"));
            if mode == Mode::Tunnel {
                assert_eq!(&outer[12..20], &[OUTER_SRC, OUTER_DST].concat()[..]);
            }
            let mut esp = esp_of(&outer);
            let o = inb
                .open(&mut esp)
                .unwrap_or_else(|e| panic!("nicflow could not open {what}: {e:?}"));
            let (nh, payload) = protected(mode, &p.data);
            assert_eq!(o.next_header, nh, "{what}");
            assert_eq!(o.seq, p.seq, "{what}");
            assert_eq!(&esp[o.payload], &payload[..], "{what}");
        }
        assert_eq!(inb.stats().dropped_total(), 0);
    }
    assert!(verdicts.next().is_none());
}

#[test]
fn scapy_opens_what_nicflow_seals() {
    if !have_scapy() {
        return skipped("python3 with scapy (and cryptography) not found");
    }
    let mut reqs = Vec::new();
    let mut expect = Vec::new();
    for esn in [false, true] {
        for (aead, mode) in CASES {
            // With ESN, start just below 2^32 so the run crosses into the
            // next epoch (and sends low half 0).
            let mut out = if esn {
                OutboundSa::new_after_seq(cfg(aead, esn), 0xFFFF_FFFC).unwrap()
            } else {
                OutboundSa::new(cfg(aead, esn)).unwrap()
            };
            let mut pkts = Vec::new();
            let mut inners = Vec::new();
            let mut buf = Vec::new();
            for size in SIZES {
                let inner = udp_packet(size);
                let (nh, payload) = protected(mode, &inner);
                out.seal(nh, &payload, &mut buf).unwrap();
                pkts.push(Pkt {
                    seq: out.last_seq(),
                    data: outer_for(mode, &inner, &buf),
                });
                inners.push(inner);
            }
            reqs.push(request("open", aead, mode, esn, &pkts));
            expect.push((aead, mode, esn, pkts, inners));
        }
    }
    let mut verdicts = scapy(&reqs).into_iter();
    for (aead, mode, esn, pkts, inners) in expect {
        for (p, inner) in pkts.iter().zip(inners) {
            let what = format!("{aead} {mode:?} esn={esn} seq={:#x}", p.seq);
            let got = verdicts
                .next()
                .expect("a verdict per packet")
                .unwrap_or_else(|e| panic!("scapy could not open {what}: {e}"));
            // Transport mode: scapy rebuilds the original IP header (length,
            // protocol, checksum); tunnel mode: the inner packet as sent.
            assert_eq!(hex(&got), hex(&inner), "{what}");
        }
    }
    assert!(verdicts.next().is_none());
}

#[test]
fn mismatched_salt_or_esn_is_refused() {
    if !have_scapy() {
        return skipped("python3 with scapy (and cryptography) not found");
    }
    // Scapy seals seq 7 with ESN (high half 0): the wire is the same as
    // without ESN, only the AAD differs, and so does a salt the wire
    // never shows. Both must fail on the ICV; the matching SA opens it.
    let inner = udp_packet(40);
    let pkt = Pkt {
        seq: 7,
        data: inner.clone(),
    };
    let reqs = [request("seal", Aead::AesGcm128, Mode::Tunnel, true, &[pkt])];
    let outer = scapy(&reqs).remove(0).unwrap();
    let esp = esp_of(&outer);
    let mut no_esn = InboundSa::new(cfg(Aead::AesGcm128, false)).unwrap();
    assert_eq!(no_esn.open(&mut esp.clone()), Err(EspDrop::AuthFailed));
    let mut other_salt = cfg(Aead::AesGcm128, true);
    other_salt.key[19] ^= 0xff;
    let mut salted = InboundSa::new(other_salt).unwrap();
    assert_eq!(salted.open(&mut esp.clone()), Err(EspDrop::AuthFailed));
    let mut good = InboundSa::new(cfg(Aead::AesGcm128, true)).unwrap();
    let mut e = esp.clone();
    let o = good.open(&mut e).unwrap();
    assert_eq!((o.next_header, &e[o.payload]), (4, &inner[..]));
}
