//! Frame templates: one complete, checksummed frame per generated flow,
//! built once before sending starts.
//!
//! The transmit loops copy a template into a ring frame once and from then
//! on only patch it per packet ([`Template::patch`]): the payload header's
//! sequence number and timestamp, and the L4 checksum, updated from a
//! precomputed partial sum (RFC 1624 style) instead of being recomputed
//! over the frame. The IPv4 header checksum never changes.

use super::payload;
use super::{fold, Mac, TrafficError};
use nicflow_packet::builder::FrameBuilder;
use rand::seq::index::sample;
use rand::SeedableRng;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// L4 protocol of the generated frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    #[default]
    Udp,
    Tcp,
    /// ICMP (v6: ICMPv6) echo request; the identifier carries the source
    /// port, the echo sequence the destination port.
    Icmp,
}

/// The 5-tuple field that differs between flows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Vary {
    #[default]
    SrcPort,
    DstPort,
    SrcIp,
    DstIp,
}

/// How the varied field's values are chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Order {
    /// base, base+1, base+2, ...
    #[default]
    Seq,
    /// Distinct values drawn at random (fixed seed) above the base.
    Random,
}

/// Addresses and ports of one flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    pub src_mac: Mac,
    pub dst_mac: Mac,
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub proto: Proto,
}

const ETH: usize = 14;

fn l3_len(v6: bool) -> usize {
    if v6 {
        40
    } else {
        20
    }
}

fn l4_len(proto: Proto) -> usize {
    match proto {
        Proto::Udp | Proto::Icmp => 8,
        Proto::Tcp => 20,
    }
}

/// Smallest `--size` (frame size with FCS) that holds the headers and the
/// payload header: 64 for UDP and ICMP over IPv4, 76 for TCP over IPv4, 84
/// for UDP/ICMPv6, 96 for TCP over IPv6.
pub fn min_size(proto: Proto, v6: bool) -> usize {
    (ETH + l3_len(v6) + l4_len(proto) + payload::LEN + 4).max(64)
}

/// One flow's frame, and where to patch it.
#[derive(Clone, Debug)]
pub struct Template {
    /// The frame's first [`Template::head_len`] bytes, seq and timestamp 0;
    /// the rest of the frame is zero.
    pub bytes: Vec<u8>,
    /// Length of the frame as written (size without FCS).
    pub frame_len: usize,
    /// Bytes that differ between flows (headers and payload header); the
    /// rest is zero padding, identical in every template.
    pub head_len: usize,
    /// Global flow index (the payload header's).
    pub flow: u32,
    stamp_off: usize,
    csum_off: usize,
    /// Ones'-complement sum of everything the L4 checksum covers, with the
    /// checksum, sequence number and timestamp fields zero.
    base_sum: u16,
    /// UDP: a computed 0 is sent as 0xffff.
    udp: bool,
}

impl Template {
    /// Build flow `flow`'s frame of `frame_len` bytes (no FCS).
    pub fn build(spec: &FlowSpec, flow: u32, frame_len: usize) -> Result<Template, TrafficError> {
        let v6 = spec.src_ip.is_ipv6();
        if spec.dst_ip.is_ipv6() != v6 {
            return Err(TrafficError::bad(
                "address",
                spec.dst_ip,
                format!("not of the same family as the source {}", spec.src_ip),
            ));
        }
        let need = min_size(spec.proto, v6) - 4;
        if frame_len < need {
            return Err(TrafficError::bad(
                "--size",
                frame_len + 4,
                format!(
                    "too small for {:?} over {}: at least {}",
                    spec.proto,
                    if v6 { "IPv6" } else { "IPv4" },
                    need + 4
                ),
            ));
        }
        // The frame with the payload header's seq and timestamp zero, every
        // checksum filled in by the packet crate's builder; the L4 sum the
        // per-packet patch starts from is the complement of that checksum.
        let l4 = ETH + l3_len(v6);
        let stamp_off = l4 + l4_len(spec.proto);
        let mut body = vec![0u8; frame_len - stamp_off];
        payload::write_template(&mut body[..payload::LEN], flow);
        let fb = FrameBuilder::new(spec.src_mac.0, spec.dst_mac.0).ttl(64);
        let fb = match (spec.src_ip, spec.dst_ip) {
            // DF: never fragmented on the way.
            (IpAddr::V4(s), IpAddr::V4(d)) => fb.ipv4(s, d).dont_fragment(),
            (IpAddr::V6(s), IpAddr::V6(d)) => fb.ipv6(s, d),
            _ => unreachable!("families checked above"),
        };
        let (sp, dp) = (spec.src_port, spec.dst_port);
        let (fb, csum_off) = match spec.proto {
            Proto::Udp => (fb.udp(sp, dp), l4 + 6),
            // PSH|ACK: mid-connection data, no handshake state.
            Proto::Tcp => (fb.tcp(sp, dp, 0x18).tcp_window(0xffff), l4 + 16),
            Proto::Icmp if v6 => (fb.icmpv6(128, 0).echo(sp, dp), l4 + 2),
            Proto::Icmp => (fb.icmp(8, 0).echo(sp, dp), l4 + 2),
        };
        let f = fb.payload(&body).build();
        debug_assert_eq!(f.len(), frame_len);
        let base_sum = !u16::from_be_bytes([f[csum_off], f[csum_off + 1]]);
        let mut t = Template {
            bytes: f,
            frame_len,
            head_len: stamp_off + payload::LEN,
            flow,
            stamp_off,
            csum_off,
            base_sum,
            udp: spec.proto == Proto::Udp,
        };
        // Leave the template itself valid (seq 0, timestamp 0).
        let mut b = std::mem::take(&mut t.bytes);
        t.patch(&mut b, 0, 0);
        b.truncate(t.head_len);
        t.bytes = b;
        Ok(t)
    }

    /// The whole frame (headers, then zero padding).
    pub fn frame(&self) -> Vec<u8> {
        let mut f = self.bytes.clone();
        f.resize(self.frame_len, 0);
        f
    }

    /// Write `seq` and `ts_ns` into `frame` (a copy of this template, at
    /// least its first [`Template::head_len`] bytes being this flow's) and
    /// fix the L4 checksum.
    #[inline(always)]
    pub fn patch(&self, frame: &mut [u8], seq: u32, ts_ns: u64) {
        let o = self.stamp_off;
        frame[o + payload::SEQ_OFF..o + payload::SEQ_OFF + 4].copy_from_slice(&seq.to_be_bytes());
        frame[o + payload::TS_OFF..o + payload::TS_OFF + 8].copy_from_slice(&ts_ns.to_be_bytes());
        let s = u32::from(self.base_sum)
            + (seq >> 16)
            + (seq & 0xffff)
            + (ts_ns >> 48) as u32
            + ((ts_ns >> 32) & 0xffff) as u32
            + ((ts_ns >> 16) & 0xffff) as u32
            + (ts_ns & 0xffff) as u32;
        let mut c = !fold(s);
        if c == 0 && self.udp {
            c = 0xffff;
        }
        frame[self.csum_off..self.csum_off + 2].copy_from_slice(&c.to_be_bytes());
    }
}

/// The flows of a run: `base` with the `vary` field stepped (`Order::Seq`)
/// or drawn at random without repeats (`Order::Random`, seed `seed`) for
/// `flows` flows.
pub fn build_flows(
    base: &FlowSpec,
    flows: u32,
    vary: Vary,
    order: Order,
    seed: u64,
) -> Result<Vec<FlowSpec>, TrafficError> {
    let n = flows as u64;
    // How many distinct values there are from the base upwards.
    let room: u64 = match vary {
        Vary::SrcPort => 65536 - u64::from(base.src_port),
        Vary::DstPort => 65536 - u64::from(base.dst_port),
        Vary::SrcIp => ip_room(base.src_ip),
        Vary::DstIp => ip_room(base.dst_ip),
    };
    if n > room {
        let what = match vary {
            Vary::SrcPort | Vary::DstPort => "port",
            Vary::SrcIp | Vary::DstIp => "address",
        };
        return Err(TrafficError::bad(
            "--flows",
            flows,
            format!("only {room} {what} values above the base"),
        ));
    }
    let offsets: Vec<u64> = match order {
        Order::Seq => (0..n).collect(),
        Order::Random => {
            // Draw from a window at most 64 Ki wide (or as wide as needed)
            // so the values stay near the base, e.g. inside a lab prefix.
            let span = room.min(n.max(65536)) as usize;
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            sample(&mut rng, span, n as usize)
                .into_iter()
                .map(|v| v as u64)
                .collect()
        }
    };
    let mut out = Vec::with_capacity(flows as usize);
    for off in offsets {
        let mut s = *base;
        match vary {
            Vary::SrcPort => s.src_port = (u64::from(base.src_port) + off) as u16,
            Vary::DstPort => s.dst_port = (u64::from(base.dst_port) + off) as u16,
            Vary::SrcIp => s.src_ip = ip_add(base.src_ip, off),
            Vary::DstIp => s.dst_ip = ip_add(base.dst_ip, off),
        }
        out.push(s);
    }
    Ok(out)
}

fn ip_room(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(a) => (1u64 << 32) - u64::from(u32::from(a)),
        IpAddr::V6(a) => {
            let low = u128::from(a) & 0xffff_ffff_ffff_ffff;
            (u128::from(u64::MAX) - low + 1).min(u128::from(u64::MAX)) as u64
        }
    }
}

fn ip_add(ip: IpAddr, off: u64) -> IpAddr {
    match ip {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a).wrapping_add(off as u32))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a).wrapping_add(off as u128))),
    }
}

/// Is `ip` inside the benchmarking prefixes (198.18.0.0/15, 2001:db8::/32)
/// that lab traffic is restricted to?
pub fn is_lab_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => u32::from(a) & 0xfffe_0000 == 0xc612_0000,
        IpAddr::V6(a) => a.segments()[0] == 0x2001 && a.segments()[1] == 0x0db8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::sum16;

    fn spec(proto: Proto, v6: bool) -> FlowSpec {
        let (s, d): (IpAddr, IpAddr) = if v6 {
            (
                "2001:db8::1".parse().unwrap(),
                "2001:db8::2".parse().unwrap(),
            )
        } else {
            ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap())
        };
        FlowSpec {
            src_mac: Mac([2, 0, 0, 0, 0, 1]),
            dst_mac: Mac([2, 0, 0, 0, 0, 2]),
            src_ip: s,
            dst_ip: d,
            src_port: 10000,
            dst_port: 9,
            proto,
        }
    }

    /// Verify the IPv4 header checksum and the L4 checksum from scratch.
    fn check(frame: &[u8], proto: Proto, v6: bool) {
        let l4 = if v6 { 54 } else { 34 };
        let mut pseudo = 0u32;
        if v6 {
            pseudo += sum16(&frame[22..54]);
        } else {
            assert_eq!(fold(sum16(&frame[14..34])), 0xffff, "IPv4 header checksum");
            pseudo += sum16(&frame[26..34]);
        }
        let len = (frame.len() - l4) as u32;
        let total = match (proto, v6) {
            (Proto::Icmp, false) => sum16(&frame[l4..]),
            (Proto::Icmp, true) => pseudo + 58 + len + sum16(&frame[l4..]),
            (Proto::Udp, _) => pseudo + 17 + len + sum16(&frame[l4..]),
            (Proto::Tcp, _) => pseudo + 6 + len + sum16(&frame[l4..]),
        };
        assert_eq!(fold(total), 0xffff, "{proto:?} v6={v6} L4 checksum");
    }

    #[test]
    fn templates_patch_to_valid_checksums() {
        for proto in [Proto::Udp, Proto::Tcp, Proto::Icmp] {
            for v6 in [false, true] {
                let len = min_size(proto, v6) - 4;
                for frame_len in [len, len + 1, 1500, 8996] {
                    let t = Template::build(&spec(proto, v6), 3, frame_len).unwrap();
                    check(&t.frame(), proto, v6);
                    let mut f = t.frame();
                    for (seq, ts) in [
                        (1, 2),
                        (u32::MAX, u64::MAX),
                        (0x1234_5678, 0xdead_beef_0102),
                    ] {
                        t.patch(&mut f, seq, ts);
                        check(&f, proto, v6);
                        let l4 = if v6 { 54 } else { 34 };
                        let st =
                            payload::read(&f[l4 + l4_len(proto)..]).expect("payload header found");
                        assert_eq!((st.flow, st.seq, st.ts_ns), (3, seq, ts));
                    }
                }
            }
        }
    }

    #[test]
    fn min_sizes_and_errors() {
        assert_eq!(min_size(Proto::Udp, false), 64);
        assert_eq!(min_size(Proto::Icmp, false), 64);
        assert_eq!(min_size(Proto::Tcp, false), 76);
        assert_eq!(min_size(Proto::Udp, true), 84);
        assert_eq!(min_size(Proto::Tcp, true), 96);
        let e = Template::build(&spec(Proto::Tcp, false), 0, 60).unwrap_err();
        assert!(e.to_string().contains("--size `64`"), "{e}");
    }

    #[test]
    fn flows_vary_and_stay_distinct() {
        let b = spec(Proto::Udp, false);
        let f = build_flows(&b, 4, Vary::SrcPort, Order::Seq, 1).unwrap();
        let ports: Vec<u16> = f.iter().map(|s| s.src_port).collect();
        assert_eq!(ports, [10000, 10001, 10002, 10003]);
        let f = build_flows(&b, 1000, Vary::DstIp, Order::Random, 1).unwrap();
        let mut ips: Vec<IpAddr> = f.iter().map(|s| s.dst_ip).collect();
        ips.sort();
        ips.dedup();
        assert_eq!(ips.len(), 1000);
        assert!(ips.iter().all(|ip| is_lab_address(*ip)));
        let e = build_flows(&b, 60000, Vary::SrcPort, Order::Seq, 1).unwrap_err();
        assert!(e.to_string().contains("--flows `60000`"), "{e}");
    }
}
