use super::*;
use crate::builder::FrameBuilder;
use proptest::prelude::*;

const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
const S: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const D: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// Datagram `i` of a flow: `len` payload bytes, IP ID 100 + i, DF.
fn dgram(i: usize, len: usize, sport: u16) -> PacketBuf {
    let payload: Vec<u8> = (0..len).map(|k| (k * 3 + i * 7) as u8).collect();
    let f = FrameBuilder::new(A, B)
        .ipv4(S, D)
        .ident(100u16.wrapping_add(i as u16))
        .dont_fragment()
        .udp(sport, 4500)
        .payload(&payload)
        .build();
    PacketBuf::from_slice(&f)
}

/// `append` every datagram to the first, moving the head into a big
/// buffer when asked: the super-frame.
fn build(dgrams: &[PacketBuf]) -> PacketBuf {
    let mut head = dgrams[0].clone();
    for d in &dgrams[1..] {
        let mut r = append(&mut head, d);
        if r == Err(Refused::NeedRoom) {
            let big = PacketBuf::with_capacity(UDP_GSO_BUF_CAPACITY);
            assert!(is_big(&big));
            grow(&mut head, big).unwrap();
            r = append(&mut head, d);
        }
        r.unwrap();
    }
    head
}

fn cut_all(frame: &[u8], gso: u16, csum: SegCsum) -> Vec<PacketBuf> {
    let c = plan(frame, gso).unwrap();
    (0..c.segments())
        .map(|i| {
            let mut b = PacketBuf::with_capacity(2048);
            assert!(c.write(frame, i, &mut b, csum));
            b
        })
        .collect()
}

#[test]
fn built_super_frame_cuts_back_into_the_datagrams_short_last() {
    let ds: Vec<PacketBuf> = (0..5)
        .map(|i| dgram(i, if i == 4 { 333 } else { 1200 }, 4500))
        .collect();
    let sf = build(&ds);
    let o = sf.offload.unwrap();
    assert_eq!(
        (
            o.gso_type,
            o.gso_size,
            o.csum_start,
            o.csum_offset,
            o.hdr_len
        ),
        (GsoType::UdpL4, 1200, 34, 6, 42)
    );
    assert!(o.csum_partial);
    let f = sf.data();
    assert_eq!(f.len(), 14 + 20 + 8 + 4 * 1200 + 333);
    assert_eq!(rd16(f, 16) as usize, f.len() - 14, "IP total length");
    assert_eq!(rd16(f, 38) as usize, f.len() - 34, "UDP length");
    assert_eq!(fold(sum_words(&f[14..34], 0)), 0xffff, "IP header checksum");
    let partial = fold(pseudo_header_ipv4(S, D, 17, (f.len() - 34) as u16));
    assert_eq!(rd16(f, 40), partial, "partial UDP checksum");
    // Full checksums: exactly the datagrams (IDs counted up from the head).
    let segs = cut_all(f, o.gso_size, SegCsum::Full);
    assert_eq!(segs.len(), 5);
    for (s, d) in segs.iter().zip(&ds) {
        assert_eq!(s.data(), d.data());
        assert!(s.offload.is_none());
    }
    // Partial: same but the checksum field, which completes to the same.
    for (s, d) in cut_all(f, o.gso_size, SegCsum::Partial).iter().zip(&ds) {
        let o = s.offload.unwrap();
        assert!(o.csum_partial && !o.is_gso());
        assert_eq!((o.csum_start, o.csum_offset), (34, 6));
        let mut done = s.data().to_vec();
        let c = udp_fixup(!fold(sum_words(&done[34..], 0)));
        done[40..42].copy_from_slice(&c.to_be_bytes());
        assert_eq!(done, d.data());
    }
}

/// `append_with` writes the payload in place and gives the bytes `append`
/// gives; it refuses what `append` refuses without calling `write`, and a
/// failing `write` leaves the head as it was.
#[test]
fn append_with_builds_the_same_frame_in_place_or_changes_nothing() {
    let ds: Vec<PacketBuf> = (0..4)
        .map(|i| dgram(i, if i == 3 { 77 } else { 900 }, 4500))
        .collect();
    let want = build(&ds);
    let mut head = PacketBuf::with_capacity(UDP_GSO_BUF_CAPACITY);
    head.set_data(ds[0].data());
    for d in &ds[1..] {
        let (hdrs, payload) = d.data().split_at(42);
        let r = append_with(&mut head, hdrs, payload.len(), |slot| {
            slot.copy_from_slice(payload);
            Ok::<(), ()>(())
        });
        assert_eq!(r, Ok(Ok(())));
    }
    assert_eq!(head.data(), want.data());
    assert_eq!(head.offload, want.offload);
    // Refused (the frame is closed by the short one): `write` not called.
    let before = head.data().to_vec();
    let hdrs = &ds[1].data()[..42];
    let r = append_with(&mut head, hdrs, 10, |_| -> Result<(), ()> {
        panic!("write called on a refusal")
    });
    assert_eq!(r, Err(Refused::No));
    // Another flow's headers are refused too.
    let mut h2 = PacketBuf::with_capacity(UDP_GSO_BUF_CAPACITY);
    h2.set_data(ds[0].data());
    let other = dgram(1, 900, 4501);
    let r = append_with(&mut h2, &other.data()[..42], 900, |_| Ok::<(), ()>(()));
    assert_eq!(r, Err(Refused::No));
    let r = append_with(&mut h2, &other.data()[..30], 900, |_| Ok::<(), ()>(()));
    assert_eq!(r, Err(Refused::No), "headers cut short");
    // No room in a small buffer: NeedRoom, nothing written.
    let mut small = ds[0].clone();
    let room = small.tailroom();
    let r = append_with(&mut small, &ds[1].data()[..42], 900, |_| Ok::<(), ()>(()));
    assert_eq!(
        r,
        if room < 900 {
            Err(Refused::NeedRoom)
        } else {
            Ok(Ok(()))
        }
    );
    // A failing write: the head is unchanged, the error handed back.
    let mut h3 = PacketBuf::with_capacity(UDP_GSO_BUF_CAPACITY);
    h3.set_data(ds[0].data());
    let r = append_with(&mut h3, &ds[1].data()[..42], 900, |slot| {
        slot.fill(0xee);
        Err("seal failed")
    });
    assert_eq!(r, Ok(Err("seal failed")));
    assert_eq!(h3.data(), ds[0].data());
    assert!(h3.offload.is_none());
    assert_eq!(head.data(), &before[..]);
}

#[test]
fn a_short_datagram_closes_the_frame_and_bigger_ones_are_refused() {
    let mut h = dgram(0, 1000, 4500);
    assert_eq!(append(&mut h, &dgram(1, 1001, 4500)), Err(Refused::No));
    let mut h = build(&[dgram(0, 1000, 4500), dgram(1, 1000, 4500)]);
    let before = h.data().to_vec();
    assert_eq!(append(&mut h, &dgram(2, 1001, 4500)), Err(Refused::No));
    assert_eq!(h.data(), &before[..], "a refusal changes nothing");
    append(&mut h, &dgram(2, 10, 4500)).unwrap();
    assert_eq!(append(&mut h, &dgram(3, 10, 4500)), Err(Refused::No));
    assert_eq!(append(&mut h, &dgram(3, 1000, 4500)), Err(Refused::No));
}

#[test]
fn other_flows_and_headers_are_refused() {
    let h0 = build(&[dgram(0, 500, 4500), dgram(1, 500, 4500)]);
    // Other source port.
    assert_eq!(
        append(&mut h0.clone(), &dgram(2, 500, 4501)),
        Err(Refused::No)
    );
    // Other TTL, other destination, not DF, not UDP, a fragment.
    let other =
        |b: FrameBuilder| PacketBuf::from_slice(&b.udp(4500, 4500).payload(&[1; 500]).build());
    for d in [
        other(FrameBuilder::new(A, B).ipv4(S, D).dont_fragment().ttl(9)),
        other(FrameBuilder::new(A, B).ipv4(S, S).dont_fragment()),
        other(FrameBuilder::new(A, B).ipv4(S, D)),
        other(FrameBuilder::new(B, A).ipv4(S, D).dont_fragment()),
    ] {
        assert_eq!(append(&mut h0.clone(), &d), Err(Refused::No));
    }
    let tcp = FrameBuilder::new(A, B)
        .ipv4(S, D)
        .tcp(1, 2, 0x10)
        .payload(&[1; 500])
        .build();
    assert_eq!(
        append(&mut h0.clone(), &PacketBuf::from_slice(&tcp)),
        Err(Refused::No)
    );
    // A frame with offload state is not a datagram to glue.
    let mut p = dgram(2, 500, 4500);
    p.offload = Some(Offload::default());
    assert_eq!(append(&mut h0.clone(), &p), Err(Refused::No));
}

#[test]
fn the_head_stops_at_the_segment_and_length_limits() {
    let mut h = build(&[dgram(0, 100, 4500), dgram(1, 100, 4500)]);
    for i in 2..UDP_GSO_MAX_SEGS {
        append(&mut h, &dgram(i, 100, 4500)).unwrap();
    }
    assert_eq!(append(&mut h, &dgram(99, 100, 4500)), Err(Refused::No));
    let big: Vec<PacketBuf> = (0..7).map(|i| dgram(i, 9000, 4500)).collect();
    let mut h = build(&big);
    assert_eq!(h.len(), 14 + 28 + 63000);
    assert_eq!(
        append(&mut h, &dgram(8, 9000, 4500)),
        Err(Refused::No),
        "over 64 KiB"
    );
    // A small buffer asks for room and stays as it was.
    let mut h = dgram(0, 1000, 4500);
    let mut small = PacketBuf::with_capacity(h.len());
    small.set_data(h.data());
    h = small;
    assert_eq!(
        append(&mut h, &dgram(1, 1000, 4500)),
        Err(Refused::NeedRoom)
    );
    assert_eq!(h.data(), dgram(0, 1000, 4500).data());
}

#[test]
fn malformed_super_frames_are_refused_by_reason() {
    let sf = build(&[dgram(0, 800, 4500), dgram(1, 800, 4500), dgram(2, 5, 4500)]);
    let f = sf.data().to_vec();
    assert_eq!(plan(&f, 800).unwrap().segments(), 3);
    assert_eq!(plan(&f, 0).unwrap_err(), CutError::BadGsoSize);
    assert_eq!(
        plan(&f, 1).unwrap_err(),
        CutError::BadGsoSize,
        "1,605 segments"
    );
    assert_eq!(
        plan(&f[..f.len() - 1], 800).unwrap_err(),
        CutError::BadLength
    );
    let mut g = f.clone();
    g[38..40].copy_from_slice(&100u16.to_be_bytes());
    assert_eq!(
        plan(&g, 800).unwrap_err(),
        CutError::BadLength,
        "UDP length"
    );
    let mut g = f.clone();
    g[16..18].copy_from_slice(&0xffffu16.to_be_bytes());
    assert_eq!(plan(&g, 800).unwrap_err(), CutError::BadLength, "IP length");
    let mut g = f.clone();
    g[20] |= 0x20; // MF
    assert_eq!(plan(&g, 800).unwrap_err(), CutError::NotUdpIpv4);
    let mut g = f.clone();
    g[23] = 6;
    assert_eq!(plan(&g, 800).unwrap_err(), CutError::NotUdpIpv4);
    assert_eq!(plan(&f[..30], 800).unwrap_err(), CutError::NotUdpIpv4);
    // No payload at all.
    let empty = FrameBuilder::new(A, B).ipv4(S, D).udp(1, 2).build();
    assert_eq!(plan(&empty, 800).unwrap_err(), CutError::BadLength);
    // A frame of one segment is one datagram.
    let one = dgram(0, 700, 4500);
    let c = plan(one.data(), 800).unwrap();
    assert_eq!(c.segments(), 1);
    let mut b = PacketBuf::with_capacity(2048);
    assert!(c.write(one.data(), 0, &mut b, SegCsum::Full));
    assert_eq!(b.data(), one.data());
    assert!(
        !c.write(one.data(), 1, &mut b, SegCsum::Full),
        "out of range"
    );
}

#[test]
fn vlan_tagged_super_frames_cut() {
    let d: Vec<PacketBuf> = (0..3)
        .map(|i| {
            let f = FrameBuilder::new(A, B)
                .vlan(7)
                .ipv4(S, D)
                .ident(100 + i as u16)
                .udp(4500, 4500)
                .payload(&vec![i as u8; if i == 2 { 50 } else { 600 }])
                .build();
            PacketBuf::from_slice(&f)
        })
        .collect();
    let sf = build(&d);
    assert_eq!(sf.offload.unwrap().csum_start, 38);
    for (s, o) in cut_all(sf.data(), 600, SegCsum::Full).iter().zip(&d) {
        assert_eq!(s.data(), o.data());
    }
}

proptest! {
    /// Any run of datagrams that `append` accepts cuts back into exactly
    /// those datagrams; the cut never panics on a mutated frame.
    #[test]
    fn append_then_cut_round_trips(
        gso in 1usize..1500,
        n in 1usize..70,
        last in 1usize..1500,
        flip in any::<(usize, u8)>(),
    ) {
        let last = last.min(gso);
        let ds: Vec<PacketBuf> = (0..n)
            .map(|i| dgram(i, if i + 1 == n { last } else { gso }, 4500))
            .collect();
        let mut head = ds[0].clone();
        let mut taken = 1;
        for d in &ds[1..] {
            let mut r = append(&mut head, d);
            if r == Err(Refused::NeedRoom) {
                grow(&mut head, PacketBuf::with_capacity(UDP_GSO_BUF_CAPACITY)).unwrap();
                r = append(&mut head, d);
            }
            if r.is_err() {
                break;
            }
            taken += 1;
        }
        prop_assert!(taken == n || taken == UDP_GSO_MAX_SEGS || head.len() + gso > 14 + 65535);
        let gso_size = head.offload.map_or(gso as u16, |o| o.gso_size);
        let segs = cut_all(head.data(), gso_size, SegCsum::Full);
        prop_assert_eq!(segs.len(), taken);
        for (s, d) in segs.iter().zip(&ds) {
            prop_assert_eq!(s.data(), d.data());
        }
        let mut g = head.data().to_vec();
        let at = flip.0 % g.len();
        g[at] ^= flip.1;
        if let Ok(c) = plan(&g, gso_size) {
            let mut b = PacketBuf::with_capacity(UDP_GSO_BUF_CAPACITY);
            for i in 0..c.segments() {
                prop_assert!(c.write(&g, i, &mut b, SegCsum::Partial));
            }
        }
    }
}
