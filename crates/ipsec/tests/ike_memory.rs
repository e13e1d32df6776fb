//! Two `IkeSession`s talking to each other in memory, with a simulated
//! clock: every exchange of the library against itself, without a network,
//! so the protocol logic is checked on any machine (the strongSwan test
//! proves the wire format against an independent implementation).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use nicflow_ipsec::ike::*;
use proptest::prelude::*;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

fn cfg(local: Ipv4Addr, remote: Ipv4Addr, psk: &str, initiator: bool) -> IkeConfig {
    let mut c = IkeConfig::new(local, remote, psk.as_bytes().to_vec());
    c.initiator = initiator;
    c
}

struct Pair {
    a: IkeSession,
    b: IkeSession,
    ev_a: Vec<IkeEvent>,
    ev_b: Vec<IkeEvent>,
    now: Instant,
    /// Datagrams carried (a->b, b->a).
    carried: (usize, usize),
    drop_a_to_b: bool,
    drop_b_to_a: bool,
}

impl Pair {
    fn new(ca: IkeConfig, cb: IkeConfig) -> Self {
        let now = Instant::now();
        let b = IkeSession::new(cb, now);
        let a = IkeSession::new(ca, now);
        Pair {
            a,
            b,
            ev_a: Vec::new(),
            ev_b: Vec::new(),
            now,
            carried: (0, 0),
            drop_a_to_b: false,
            drop_b_to_a: false,
        }
    }

    /// Moves datagrams until both sides are quiet.
    fn pump(&mut self) {
        for _ in 0..1000 {
            let mut moved = false;
            while let Some(d) = self.a.poll_transmit() {
                moved = true;
                if !self.drop_a_to_b {
                    self.carried.0 += 1;
                    self.b.input(d.src_port, d.dst_port, &d.payload, self.now);
                }
            }
            while let Some(d) = self.b.poll_transmit() {
                moved = true;
                if !self.drop_b_to_a {
                    self.carried.1 += 1;
                    self.a.input(d.src_port, d.dst_port, &d.payload, self.now);
                }
            }
            while let Some(e) = self.a.poll_event() {
                self.ev_a.push(e);
            }
            while let Some(e) = self.b.poll_event() {
                self.ev_b.push(e);
            }
            if !moved {
                return;
            }
        }
        panic!("endless ping-pong");
    }

    /// Advances the clock in steps, ticking and pumping.
    fn advance(&mut self, total: Duration, step: Duration) {
        let end = self.now + total;
        while self.now < end {
            self.now += step;
            self.a.tick(self.now);
            self.b.tick(self.now);
            self.pump();
        }
    }

    fn take(&mut self) -> (Vec<IkeEvent>, Vec<IkeEvent>) {
        (
            std::mem::take(&mut self.ev_a),
            std::mem::take(&mut self.ev_b),
        )
    }
}

/// The (outbound, inbound) keys of the single ChildSaUp in `ev`.
fn child_up(ev: &[IkeEvent]) -> (ChildKeys, ChildKeys, ChildMode, bool) {
    let ups: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            IkeEvent::ChildSaUp {
                mode,
                encap_udp,
                outbound,
                inbound,
            } => Some((outbound.clone(), inbound.clone(), *mode, *encap_udp)),
            _ => None,
        })
        .collect();
    assert_eq!(ups.len(), 1, "exactly one ChildSaUp expected in {ev:?}");
    ups.into_iter().next().unwrap()
}

fn rekeyed(ev: &[IkeEvent]) -> (u32, u32, ChildKeys, ChildKeys) {
    ev.iter()
        .find_map(|e| match e {
            IkeEvent::ChildSaRekeyed {
                old_inbound_spi,
                old_outbound_spi,
                outbound,
                inbound,
                ..
            } => Some((
                *old_inbound_spi,
                *old_outbound_spi,
                outbound.clone(),
                inbound.clone(),
            )),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no ChildSaRekeyed in {ev:?}"))
}

/// The `responder` flag of the rekey in `ev`.
fn answered(ev: &[IkeEvent]) -> bool {
    ev.iter()
        .find_map(|e| match e {
            IkeEvent::ChildSaRekeyed { responder, .. } => Some(*responder),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no ChildSaRekeyed in {ev:?}"))
}

fn deleted(ev: &[IkeEvent]) -> Vec<(u32, u32)> {
    ev.iter()
        .filter_map(|e| match e {
            IkeEvent::ChildSaDeleted {
                inbound_spi,
                outbound_spi,
            } => Some((*inbound_spi, *outbound_spi)),
            _ => None,
        })
        .collect()
}

fn established_pair(ca: IkeConfig, cb: IkeConfig) -> (Pair, ChildKeys, ChildKeys) {
    let mut p = Pair::new(ca, cb);
    p.pump();
    let (ea, eb) = p.take();
    assert!(ea.contains(&IkeEvent::IkeUp), "{ea:?}");
    assert!(eb.contains(&IkeEvent::IkeUp), "{eb:?}");
    let (a_out, a_in, mode_a, encap_a) = child_up(&ea);
    let (b_out, b_in, mode_b, _) = child_up(&eb);
    assert_eq!(a_out, b_in, "A's outbound SA is B's inbound SA");
    assert_eq!(a_in, b_out, "A's inbound SA is B's outbound SA");
    assert_eq!(mode_a, mode_b);
    assert!(!encap_a, "no NAT between the two");
    (p, a_out, a_in)
}

#[test]
fn ike_sa_init_and_auth_transport_mode() {
    let (p, out, inb) = established_pair(cfg(A, B, "secret", true), cfg(B, A, "secret", false));
    assert_eq!(out.key.len(), 16 + 4);
    assert_ne!(out.key, inb.key);
    assert!(!out.esn);
    assert!(p.a.is_established() && p.b.is_established());
    // IKE_SA_INIT and IKE_AUTH: two requests, two responses.
    assert_eq!(p.carried, (2, 2));
    // Debug never shows key bytes.
    let dbg = format!("{out:?}");
    assert!(dbg.contains("<20 bytes>"), "{dbg}");
    assert!(
        !dbg.contains(&format!("{:?}", out.key))
            && !dbg.contains(&format!("{}, {}", out.key[0], out.key[1]))
    );
}

#[test]
fn tunnel_mode_aes256_esn() {
    let mut ca = cfg(A, B, "secret", true);
    let mut cb = cfg(B, A, "secret", false);
    for c in [&mut ca, &mut cb] {
        c.child_ts = ChildTs::host_tunnel();
        c.esp_aead_key_len = 32;
        c.esn = true;
    }
    let mut p = Pair::new(ca, cb);
    p.pump();
    let (ea, _) = p.take();
    let (out, _, mode, _) = child_up(&ea);
    assert_eq!(mode, ChildMode::Tunnel);
    assert_eq!(out.key.len(), 36);
    assert!(out.esn);
}

#[test]
fn identities_are_checked() {
    let mut ca = cfg(A, B, "secret", true);
    ca.local_id = Some("a.lab.example".into());
    ca.remote_id = Some("198.18.0.2".into());
    let mut cb = cfg(B, A, "secret", false);
    cb.remote_id = Some("other.lab.example".into());
    let mut p = Pair::new(ca, cb);
    p.pump();
    let (ea, eb) = p.take();
    assert!(
        eb.iter().any(
            |e| matches!(e, IkeEvent::IkeFailed { reason } if reason.contains("a.lab.example"))
        ),
        "{eb:?}"
    );
    assert!(ea.iter().any(
        |e| matches!(e, IkeEvent::IkeFailed { reason } if reason.contains("AUTHENTICATION_FAILED"))
    ));
}

#[test]
fn wrong_psk_fails_cleanly_on_both_sides() {
    let mut p = Pair::new(cfg(A, B, "secret", true), cfg(B, A, "other", false));
    p.pump();
    let (ea, eb) = p.take();
    let reason = |ev: &[IkeEvent]| {
        ev.iter()
            .find_map(|e| match e {
                IkeEvent::IkeFailed { reason } => Some(reason.clone()),
                _ => None,
            })
            .unwrap_or_default()
    };
    assert!(reason(&ea).contains("AUTHENTICATION_FAILED"), "{ea:?}");
    assert!(reason(&eb).contains("pre-shared keys differ"), "{eb:?}");
    for ev in [&ea, &eb] {
        assert!(
            !ev.iter()
                .any(|e| matches!(e, IkeEvent::ChildSaUp { .. } | IkeEvent::IkeUp)),
            "{ev:?}"
        );
    }
    assert!(!p.a.is_established() && !p.b.is_established());
    // Nothing is retransmitted afterwards.
    p.advance(Duration::from_secs(120), Duration::from_secs(1));
    assert!(!p.a.is_established() && !p.b.is_established());
}

#[test]
fn both_initiating_converge_on_one_sa() {
    let mut p = Pair::new(cfg(A, B, "secret", true), cfg(B, A, "secret", true));
    p.pump();
    p.advance(Duration::from_secs(10), Duration::from_millis(500));
    let (ea, eb) = p.take();
    let (a_out, a_in, _, _) = child_up(&ea);
    let (b_out, b_in, _, _) = child_up(&eb);
    assert_eq!((a_out, a_in), (b_in, b_out));
}

#[test]
fn invalid_ke_payload_retries_with_the_responders_group() {
    let mut cb = cfg(B, A, "secret", false);
    cb.dh_groups = vec![DH_ECP256];
    let (p, _, _) = established_pair(cfg(A, B, "secret", true), cb);
    // INIT (refused), INIT, AUTH.
    assert_eq!(p.carried, (3, 3));
}

#[test]
fn lost_packets_are_retransmitted() {
    let mut p = Pair::new(cfg(A, B, "secret", true), cfg(B, A, "secret", false));
    p.drop_b_to_a = true;
    p.pump();
    p.drop_b_to_a = false;
    p.advance(Duration::from_secs(5), Duration::from_millis(250));
    let (ea, eb) = p.take();
    child_up(&ea);
    child_up(&eb);
}

#[test]
fn child_rekey_from_either_side() {
    let (mut p, a_out, a_in) =
        established_pair(cfg(A, B, "secret", true), cfg(B, A, "secret", false));
    // A (the IKE initiator) rekeys.
    p.a.rekey_child(a_in.spi, p.now);
    p.pump();
    let (ea, eb) = p.take();
    let (old_in, old_out, a_out2, a_in2) = rekeyed(&ea);
    assert_eq!((old_in, old_out), (a_in.spi, a_out.spi));
    let (_, _, b_out2, b_in2) = rekeyed(&eb);
    assert_eq!((a_out2.clone(), a_in2.clone()), (b_in2, b_out2));
    assert_ne!(a_out2.key, a_out.key);
    assert_eq!(deleted(&ea), vec![(a_in.spi, a_out.spi)]);
    assert_eq!(deleted(&eb), vec![(a_out.spi, a_in.spi)]);
    // Who answered holds its new outbound SA back; who asked does not.
    assert_eq!((answered(&ea), answered(&eb)), (false, true));

    // B (the IKE responder) rekeys the new child.
    p.b.rekey_child(a_out2.spi, p.now);
    p.pump();
    let (ea, eb) = p.take();
    let (_, _, a_out3, a_in3) = rekeyed(&ea);
    let (_, _, b_out3, b_in3) = rekeyed(&eb);
    assert_eq!((a_out3, a_in3), (b_in3, b_out3));
    assert_eq!(deleted(&ea), vec![(a_in2.spi, a_out2.spi)]);
}

#[test]
fn child_rekey_by_timer() {
    let mut ca = cfg(A, B, "secret", true);
    ca.lifetimes.child_rekey = Duration::from_secs(60);
    let (mut p, _, _) = established_pair(ca, cfg(B, A, "secret", false));
    p.advance(Duration::from_secs(61), Duration::from_secs(1));
    let (ea, eb) = p.take();
    let (_, _, a_out, a_in) = rekeyed(&ea);
    let (_, _, b_out, b_in) = rekeyed(&eb);
    assert_eq!((a_out, a_in), (b_in, b_out));
    assert_eq!(deleted(&ea).len(), 1);
}

#[test]
fn ike_rekey_keeps_children_and_later_exchanges_work() {
    let (mut p, _, a_in) = established_pair(cfg(A, B, "secret", true), cfg(B, A, "secret", false));
    p.a.rekey_ike(p.now);
    p.pump();
    let (ea, eb) = p.take();
    assert!(
        deleted(&ea).is_empty() && deleted(&eb).is_empty(),
        "{ea:?} {eb:?}"
    );
    assert!(!ea.contains(&IkeEvent::IkeDown) && !eb.contains(&IkeEvent::IkeDown));
    assert!(p.a.is_established() && p.b.is_established());
    // The child rekey runs over the new IKE SA (new SK_d on both sides).
    p.b.rekey_ike(p.now);
    p.pump();
    p.a.rekey_child(a_in.spi, p.now);
    p.pump();
    let (ea, eb) = p.take();
    let (_, _, a_out, a_in2) = rekeyed(&ea);
    let (_, _, b_out, b_in) = rekeyed(&eb);
    assert_eq!((a_out, a_in2), (b_in, b_out));
}

#[test]
fn dead_peer_is_detected() {
    let mut ca = cfg(A, B, "secret", true);
    ca.lifetimes.dpd = Duration::from_secs(10);
    let (mut p, a_out, a_in) = established_pair(ca, cfg(B, A, "secret", false));
    // Idle but alive: liveness checks are answered.
    p.advance(Duration::from_secs(60), Duration::from_secs(1));
    assert!(p.a.is_established());
    p.drop_b_to_a = true;
    p.advance(Duration::from_secs(300), Duration::from_secs(1));
    let (ea, _) = p.take();
    assert!(
        ea.iter().any(
            |e| matches!(e, IkeEvent::IkeFailed { reason } if reason.contains("did not answer"))
        ),
        "{ea:?}"
    );
    assert_eq!(deleted(&ea), vec![(a_in.spi, a_out.spi)]);
    assert_eq!(ea.last(), Some(&IkeEvent::IkeDown));
}

#[test]
fn close_deletes_at_the_peer() {
    let (mut p, _, _) = established_pair(cfg(A, B, "secret", true), cfg(B, A, "secret", false));
    p.b.close(p.now);
    p.pump();
    let (ea, eb) = p.take();
    for ev in [&ea, &eb] {
        assert_eq!(deleted(ev).len(), 1, "{ev:?}");
        assert_eq!(ev.last(), Some(&IkeEvent::IkeDown));
    }
    assert!(!p.a.is_established() && !p.b.is_established());
}

#[test]
fn peer_restart_replaces_the_sa() {
    let (mut p, a_out, a_in) =
        established_pair(cfg(A, B, "secret", true), cfg(B, A, "secret", false));
    // A "restarts": a fresh session initiates while B still has the old SA.
    p.a = IkeSession::new(cfg(A, B, "secret", true), p.now);
    p.pump();
    let (ea, eb) = p.take();
    let (b_out, b_in, _, _) = child_up(&eb);
    let (a_out2, a_in2, _, _) = child_up(&ea);
    assert_eq!((a_out2, a_in2), (b_in, b_out));
    assert_eq!(deleted(&eb), vec![(a_out.spi, a_in.spi)]);
    assert!(!eb.contains(&IkeEvent::IkeDown));
}

#[test]
fn mode_mismatch_refuses_the_child() {
    let mut cb = cfg(B, A, "secret", false);
    cb.child_ts = ChildTs::host_tunnel();
    let mut p = Pair::new(cfg(A, B, "secret", true), cb);
    p.pump();
    let (ea, eb) = p.take();
    assert!(!ea
        .iter()
        .chain(&eb)
        .any(|e| matches!(e, IkeEvent::ChildSaUp { .. })));
    assert!(
        ea.iter().any(
            |e| matches!(e, IkeEvent::IkeFailed { reason } if reason.contains("NO_PROPOSAL_CHOSEN"))
        ),
        "{ea:?}"
    );
}

/// Records every datagram of a full session, for the fuzz tests below.
fn transcript() -> Vec<(u16, u16, Vec<u8>)> {
    let now = Instant::now();
    let mut a = IkeSession::new(cfg(A, B, "secret", true), now);
    let mut b = IkeSession::new(cfg(B, A, "secret", false), now);
    let mut all = Vec::new();
    for _ in 0..10 {
        while let Some(d) = a.poll_transmit() {
            b.input(d.src_port, d.dst_port, &d.payload, now);
            all.push((d.src_port, d.dst_port, d.payload));
        }
        while let Some(d) = b.poll_transmit() {
            a.input(d.src_port, d.dst_port, &d.payload, now);
            all.push((d.src_port, d.dst_port, d.payload));
        }
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600), port in prop_oneof![Just(500u16), Just(4500u16)], init in any::<bool>()) {
        let now = Instant::now();
        let mut s = IkeSession::new(cfg(A, B, "secret", init), now);
        s.input(port, port, &data, now);
        s.tick(now + Duration::from_secs(3));
        while s.poll_transmit().is_some() {}
    }

    /// Valid messages with a few bytes changed reach deeper parsers.
    #[test]
    fn mutated_messages_never_panic(idx in 0usize..4, flips in proptest::collection::vec((any::<u16>(), any::<u8>()), 1..6), cut in any::<u16>()) {
        let t = transcript();
        let (sp, dp, mut msg) = t[idx % t.len()].clone();
        for (pos, val) in flips {
            let n = msg.len();
            msg[pos as usize % n] = val;
        }
        if cut % 4 == 0 {
            msg.truncate(cut as usize % (msg.len() + 1));
        }
        let now = Instant::now();
        // Feed to a responder and to an initiator (which expects a response).
        let mut r = IkeSession::new(cfg(B, A, "secret", false), now);
        r.input(sp, dp, &msg, now);
        let mut i = IkeSession::new(cfg(A, B, "secret", true), now);
        i.input(dp, sp, &msg, now);
        i.tick(now + Duration::from_secs(100));
    }
}
