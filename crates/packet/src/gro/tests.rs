use super::*;
use crate::builder::FrameBuilder;
use proptest::prelude::*;

const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
const S: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const D: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9];

/// Segment `i` of a stream of `mss`-byte segments (`len` bytes of payload).
fn seg(i: u32, mss: u32, len: usize, flags: u16, df: bool) -> PacketBuf {
    let payload: Vec<u8> = (0..len).map(|k| (k as u32 + i * 7) as u8).collect();
    let mut b = FrameBuilder::new(A, B)
        .ipv4(S, D)
        .ident(100u16.wrapping_add(i as u16))
        .tcp(40000, 5201, flags)
        .tcp_seq(1000 + i * mss)
        .tcp_ack(77)
        .tcp_window(512)
        .tcp_options(&TS)
        .payload(&payload);
    if df {
        b = b.dont_fragment();
    }
    let f = b.build();
    let mut p = PacketBuf::with_capacity(GRO_BUF_CAPACITY);
    assert!(p.set_data(&f));
    p
}

/// The stream's second segment (seq 2000, 1000 zero bytes, no DF) with
/// the IP ID, window and TCP options given.
fn second(ident: u16, window: u16, options: [u8; 12]) -> PacketBuf {
    let f = FrameBuilder::new(A, B)
        .ipv4(S, D)
        .ident(ident)
        .tcp(40000, 5201, ACK)
        .tcp_seq(2000)
        .tcp_ack(77)
        .tcp_window(window)
        .tcp_options(&options)
        .payload(&[0; 1000])
        .build();
    PacketBuf::from_slice(&f)
}

const ACK: u16 = 0x10;
const PSH_ACK: u16 = 0x18;

#[test]
fn three_segments_become_one_super_frame() {
    let mut h = seg(0, 1000, 1000, ACK, true);
    assert!(is_candidate(&h));
    merge(&mut h, &seg(1, 1000, 1000, ACK, true)).unwrap();
    merge(&mut h, &seg(2, 1000, 300, PSH_ACK, true)).unwrap();
    let o = h.offload.unwrap();
    assert_eq!(
        (o.gso_type, o.gso_size, o.csum_start, o.csum_offset),
        (GsoType::TcpV4, 1000, 34, 16)
    );
    assert!(o.csum_partial);
    let f = h.data();
    let ip_len = rd16(f, IP + 2) as usize;
    assert_eq!(ip_len, 20 + 32 + 2300);
    assert_eq!(f.len(), 14 + ip_len);
    assert_eq!(
        fold(sum_words(&f[IP..TCP], 0)),
        0xffff,
        "IP header checksum"
    );
    assert_eq!(f[TCP + 13], PSH_ACK as u8);
    let partial = fold(pseudo_header_ipv4(S, D, 6, (ip_len - 20) as u16));
    assert_eq!(rd16(f, TCP + 16), partial);
    // The payload is the three payloads in order.
    let pay = &f[TCP + 32..];
    assert_eq!(pay[1000], seg(1, 1000, 1000, ACK, true).data()[TCP + 32]);
    assert_eq!(pay[2000], seg(2, 1000, 300, ACK, true).data()[TCP + 32]);
    // After PSH nothing more.
    assert_eq!(
        merge(&mut h, &seg(3, 1000, 100, ACK, true)),
        Err(Refused::No)
    );
}

#[test]
fn refusals_leave_the_head_unchanged() {
    let base = seg(0, 1000, 1000, ACK, false);
    let cases: Vec<(&str, PacketBuf)> = vec![
        ("gap", seg(2, 1000, 1000, ACK, false)),
        ("larger than gso_size", seg(1, 1000, 1200, ACK, false)),
        ("FIN", seg(1, 1000, 1000, 0x11, false)),
        ("DF differs", seg(1, 1000, 1000, ACK, true)),
        ("other port", {
            let mut p = seg(1, 1000, 1000, ACK, false);
            p.data_mut()[TCP + 1] ^= 1;
            p
        }),
        ("bad TCP checksum", {
            let mut p = seg(1, 1000, 1000, ACK, false);
            let n = p.len();
            p.data_mut()[n - 1] ^= 0x40;
            p
        }),
        ("other window", second(101, 513, TS)),
        ("other timestamp", {
            let mut ts = TS;
            ts[11] = 10;
            second(101, 512, ts)
        }),
        ("IP ID not counting without DF", second(300, 512, TS)),
    ];
    for (what, next) in cases {
        let mut h = base.clone();
        assert_eq!(merge(&mut h, &next), Err(Refused::No), "{what}");
        assert_eq!(h.data(), base.data(), "{what}");
        assert!(h.offload.is_none(), "{what}");
    }
    // Another tunnel's segment (a `key=flow` port's other VNI).
    let mut h = base.clone();
    let mut other = seg(1, 1000, 1000, ACK, false);
    other.tun = Some(crate::buf::TunnelMeta {
        id: 7,
        ..Default::default()
    });
    assert_eq!(merge(&mut h, &other), Err(Refused::No));
    // A short segment ends the frame: the next full one is refused.
    let mut h = base.clone();
    merge(&mut h, &seg(1, 1000, 500, ACK, false)).unwrap();
    assert_eq!(
        merge(&mut h, &seg(2, 1000, 500, ACK, false)),
        Err(Refused::No)
    );
}

/// The payload's checksum is summed as it is appended to a built
/// super-frame: a segment whose sum is wrong (TCP payload, TCP header or
/// IP header) is refused and its bytes taken off again, leaving the head
/// exactly as before (bytes, length, offload), and the right segment
/// merges after it as if the bad one had never come. Against a head
/// without room, a bad segment is refused outright (not `NeedRoom`).
#[test]
fn a_bad_segment_after_a_built_head_is_taken_off_again() {
    let mut h = seg(0, 1000, 1000, ACK, false);
    merge(&mut h, &seg(1, 1000, 1000, ACK, false)).unwrap();
    let (before, offload) = (h.data().to_vec(), h.offload);
    let corrupt = |at: usize| {
        let mut p = seg(2, 1000, 1000, ACK, false);
        p.data_mut()[at] ^= 0x40;
        p
    };
    let n = seg(2, 1000, 1000, ACK, false).len();
    for (what, bad) in [
        ("last payload byte", corrupt(n - 1)),
        ("first payload byte", corrupt(TCP + 32)),
        ("TCP urgent pointer", corrupt(TCP + 18)),
        ("IP header checksum", corrupt(IP + 10)),
    ] {
        assert_eq!(merge(&mut h, &bad), Err(Refused::No), "{what}");
        assert_eq!(h.data(), &before[..], "{what}");
        assert_eq!(h.offload, offload, "{what}");
    }
    merge(&mut h, &seg(2, 1000, 1000, ACK, false)).unwrap();
    let mut want = seg(0, 1000, 1000, ACK, false);
    for i in 1..3 {
        merge(&mut want, &seg(i, 1000, 1000, ACK, false)).unwrap();
    }
    assert_eq!(h.data(), want.data());
    // A head without room: a bad segment is refused, a good one asks.
    let f = seg(0, 1000, 1000, ACK, true);
    let mut small = PacketBuf::with_capacity(1100);
    small.set_data(f.data());
    let mut bad = seg(1, 1000, 1000, ACK, true);
    let end = bad.len() - 1;
    bad.data_mut()[end] ^= 1;
    assert_eq!(merge(&mut small, &bad), Err(Refused::No));
    assert_eq!(small.data(), f.data());
    assert_eq!(
        merge(&mut small, &seg(1, 1000, 1000, ACK, true)),
        Err(Refused::NeedRoom)
    );
}

#[test]
fn a_small_buffer_asks_for_room_and_grow_keeps_the_frame() {
    let f = seg(0, 1000, 1000, ACK, true);
    let mut h = PacketBuf::with_capacity(1100);
    h.set_data(f.data());
    let next = seg(1, 1000, 1000, ACK, true);
    assert_eq!(merge(&mut h, &next), Err(Refused::NeedRoom));
    assert_eq!(h.data(), f.data());
    // A buffer too small for the frame: refused, nothing moved.
    let small = PacketBuf::with_capacity(100);
    assert!(!is_big(&small));
    assert!(grow(&mut h, small).is_err());
    assert_eq!(h.data(), f.data());
    let big = PacketBuf::with_capacity(GRO_BUF_CAPACITY);
    assert!(is_big(&big));
    let old = grow(&mut h, big).unwrap();
    assert!(old.capacity() < GRO_BUF_CAPACITY);
    merge(&mut h, &next).unwrap();
    assert_eq!(h.len(), f.len() + 1000);
}

proptest! {
    /// Arbitrary bytes never panic and never merge into a valid head
    /// unless they are a valid next segment.
    #[test]
    fn arbitrary_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut h = seg(0, 100, 100, ACK, true);
        let n = PacketBuf::from_slice(&bytes);
        let _ = is_candidate(&n);
        let _ = same_flow(h.data(), n.data());
        let before = h.data().to_vec();
        if merge(&mut h, &n).is_err() {
            prop_assert_eq!(h.data(), &before[..]);
        }
        let mut m = PacketBuf::from_slice(&bytes);
        let _ = merge(&mut m, &seg(0, 100, 100, ACK, true));
    }
}

/// A sender with one fixed IP ID and DF: not merged (cutting the frame
/// again would renumber the IDs).
#[test]
fn fixed_ip_ids_are_not_merged() {
    let b = seg(1, 1000, 1000, ACK, true);
    let mut a = seg(0, 1000, 1000, ACK, true);
    let id = rd16(b.data(), IP + 4);
    let f = a.data_mut();
    f[IP + 4..IP + 6].copy_from_slice(&id.to_be_bytes());
    f[IP + 10..IP + 12].copy_from_slice(&[0, 0]);
    let c = crate::checksum::checksum(&f[IP..TCP]);
    f[IP + 10..IP + 12].copy_from_slice(&c.to_be_bytes());
    assert!(is_candidate(&a));
    let before = a.data().to_vec();
    assert_eq!(merge(&mut a, &b), Err(Refused::No));
    assert_eq!(a.data(), &before[..]);
}

proptest! {
    /// A valid next segment with bytes changed and its length cut: never a
    /// panic, and a refusal changes nothing. (Mutating a valid segment
    /// gets past the flow check into the parser and the rules.)
    #[test]
    fn mutated_segments_never_panic(
        flips in proptest::collection::vec((0usize..200, any::<u8>()), 1..6),
        cut in 0usize..400,
    ) {
        let mut h = seg(0, 100, 100, ACK, true);
        let mut n = seg(1, 100, 100, ACK, true);
        for (i, v) in flips {
            if i < n.len() {
                n.data_mut()[i] = v;
            }
        }
        let keep = n.len().saturating_sub(cut % (n.len() + 1));
        n.truncate(keep);
        let before = h.data().to_vec();
        match merge(&mut h, &n) {
            Ok(()) => prop_assert!(h.len() > before.len()),
            Err(_) => prop_assert_eq!(h.data(), &before[..]),
        }
        let mut m = n.clone();
        let _ = merge(&mut m, &seg(2, 100, 100, ACK, true));
    }
}
