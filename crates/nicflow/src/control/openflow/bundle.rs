//! OpenFlow bundles (`OFPT_BUNDLE_CONTROL`, `OFPT_BUNDLE_ADD_MESSAGE`),
//! as ovn-controller and `ovs-ofctl --bundle` use them: messages collected
//! per connection and bundle id, then committed all at once.
//!
//! A commit is atomic and ordered whatever the flags say (Open vSwitch
//! applies every bundle that way too): the messages run in the order they
//! were added, on the forwarding thread, with revalidation of the cached
//! and kernel flows deferred to the end ([`Bridge::begin_deferred`]); if
//! one fails, the tables, groups and pending `FLOW_REMOVED`s are put back
//! as they were ([`Bridge::restore_rules`]), the failing message gets its
//! error under its own xid, and the commit gets `OFPBFC_MSG_FAILED` — as
//! Open vSwitch answers. No packet sees half a bundle: userspace forwards
//! nothing during the commit, and kernel flows change only after it.
//! `PACKET_OUT`s in a bundle are checked in order and sent after the
//! commit succeeded (through the tables as they are after the whole
//! bundle).
//!
//! Control errors are Open vSwitch's: opening an existing id, closing a
//! closed bundle or with other flags discard the bundle (`OFPBFC_BAD_ID`,
//! `OFPBFC_BUNDLE_CLOSED`, `OFPBFC_BAD_FLAGS`); an unknown id is
//! `OFPBFC_BAD_ID`; a `BUNDLE_ADD` opens its bundle if needed and is
//! refused for a closed one. `METER_MOD` is `OFPBFC_MSG_UNSUP` (OVS
//! refuses it too). Unlike Open vSwitch, a message refused when added
//! (bad actions, or one the codec cannot read) also makes the commit fail
//! (`OFPBFC_MSG_FAILED`, nothing applied), so a bundle is never committed
//! without one of its messages.
//!
//! Bounds: [`MAX_BUNDLES`] open bundles per connection
//! (`OFPBFC_OUT_OF_BUNDLES`), [`MAX_MSGS`] messages across a connection's bundles
//! (`OFPBFC_MSG_TOO_MANY`), and a bundle untouched for [`IDLE_TIMEOUT`] is
//! discarded with `OFPBFC_TIMEOUT` (OVS's default idle timeout).

use super::handle;
use super::session::Session;
use crate::bridge::Bridge;
use nicflow_openflow::error::{BadRequest, BundleFailed};
use nicflow_openflow::msg::{BundleAdd, BundleControl, BundleCtrlType, Decoded, Message};
use nicflow_openflow::OfpError;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Open bundles per connection.
pub const MAX_BUNDLES: usize = 64;
/// Messages held by one connection's open bundles together (a full OVN
/// install of a large chassis fits; 64 bundles cannot hold 64 times it).
pub const MAX_MSGS: usize = 1 << 20;
/// A bundle nobody touched for this long is discarded.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

fn bf(c: BundleFailed) -> OfpError {
    OfpError::BundleFailed(c)
}

struct Bundle {
    flags: u16,
    closed: bool,
    /// A message was refused when added: the commit must fail.
    failed: bool,
    msgs: Vec<Decoded>,
    used: Instant,
    /// The xid that opened it (for the timeout error).
    xid: u32,
}

/// One connection's open bundles.
#[derive(Default)]
pub struct Bundles {
    map: BTreeMap<u32, Bundle>,
}

impl Bundles {
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// A `BUNDLE_ADD` for `id` was refused before it reached the bundle
    /// (the codec could not read it): the commit will fail.
    /// A lost first message opens the bundle as failed, so a later good
    /// add cannot start a clean bundle that commits without it.
    pub fn poison(&mut self, id: u32, flags: u16, xid: u32, now: Instant) {
        if let Some(b) = self.map.get_mut(&id) {
            b.failed = true;
        } else if self.insert(id, flags, xid, now).is_ok() {
            if let Some(b) = self.map.get_mut(&id) {
                b.failed = true;
            }
        }
    }

    /// Messages held by every open bundle of the connection.
    fn held(&self) -> usize {
        self.map.values().map(|b| b.msgs.len()).sum()
    }

    /// Bundles idle for [`IDLE_TIMEOUT`]: removed, with the xid that
    /// opened each (for the `OFPBFC_TIMEOUT` error).
    pub fn expire(&mut self, now: Instant) -> Vec<u32> {
        let mut gone = Vec::new();
        self.map.retain(|_, b| {
            let keep = now.saturating_duration_since(b.used) < IDLE_TIMEOUT;
            if !keep {
                gone.push(b.xid);
            }
            keep
        });
        gone
    }

    fn insert(&mut self, id: u32, flags: u16, xid: u32, now: Instant) -> Result<(), OfpError> {
        if self.map.len() >= MAX_BUNDLES {
            return Err(bf(BundleFailed::OUT_OF_BUNDLES));
        }
        self.map.insert(
            id,
            Bundle {
                flags,
                closed: false,
                failed: false,
                msgs: Vec::new(),
                used: now,
                xid,
            },
        );
        Ok(())
    }
}

/// `OFPT_BUNDLE_CONTROL`: the reply is queued here; returns whether the
/// tables changed (a commit).
pub fn control(
    s: &mut Session,
    br: &mut Bridge,
    bc: &BundleControl,
    xid: u32,
    now: Instant,
) -> Result<bool, OfpError> {
    let id = bc.bundle_id;
    let mut changed = false;
    match bc.ctrl {
        BundleCtrlType::OpenRequest => {
            if s.bundles.map.remove(&id).is_some() {
                return Err(bf(BundleFailed::BAD_ID));
            }
            s.bundles.insert(id, bc.flags, xid, now)?;
        }
        BundleCtrlType::CloseRequest => {
            let b = s.bundles.map.get_mut(&id).ok_or(bf(BundleFailed::BAD_ID))?;
            if b.closed {
                s.bundles.map.remove(&id);
                return Err(bf(BundleFailed::BUNDLE_CLOSED));
            }
            if b.flags != bc.flags {
                s.bundles.map.remove(&id);
                return Err(bf(BundleFailed::BAD_FLAGS));
            }
            b.closed = true;
            b.used = now;
        }
        BundleCtrlType::CommitRequest => {
            let b = s.bundles.map.remove(&id).ok_or(bf(BundleFailed::BAD_ID))?;
            if b.flags != bc.flags {
                return Err(bf(BundleFailed::BAD_FLAGS));
            }
            if b.failed {
                return Err(bf(BundleFailed::MSG_FAILED));
            }
            changed = commit(s, br, b.msgs, now)?;
        }
        BundleCtrlType::DiscardRequest => {
            s.bundles.map.remove(&id).ok_or(bf(BundleFailed::BAD_ID))?;
        }
        // Replies are the switch's to send.
        _ => return Err(bf(BundleFailed::BAD_TYPE)),
    }
    if let Some(reply) = bc.reply() {
        s.send(&Message::BundleControl(reply), xid);
    }
    Ok(changed)
}

/// `OFPT_BUNDLE_ADD_MESSAGE`: checked now (the errors a message would get
/// on its own), applied at the commit.
pub fn add(
    s: &mut Session,
    ba: &BundleAdd,
    version: u8,
    xid: u32,
    now: Instant,
) -> Result<(), OfpError> {
    let id = ba.bundle_id;
    match s.bundles.map.get(&id) {
        None => s.bundles.insert(id, ba.flags, xid, now)?,
        Some(b) if b.closed => {
            s.bundles.map.remove(&id);
            return Err(bf(BundleFailed::BUNDLE_CLOSED));
        }
        Some(b) if b.flags != ba.flags => {
            s.bundles.map.remove(&id);
            return Err(bf(BundleFailed::BAD_FLAGS));
        }
        Some(_) => {}
    }
    let full = s.bundles.held() >= MAX_MSGS;
    let Some(b) = s.bundles.map.get_mut(&id) else {
        return Err(bf(BundleFailed::BAD_ID));
    };
    b.used = now;
    let check = match &*ba.message {
        Message::FlowMod(fm) => handle::check_flow_mod(fm),
        Message::GroupMod(gm) => gm.buckets.iter().try_for_each(|b| b.translate().map(drop)),
        Message::PacketOut(po) => handle::check_packet_out(po).map(drop),
        Message::PortMod(_) => Ok(()),
        // Open vSwitch takes no meters in bundles either (OVN sends them
        // outside).
        _ => Err(bf(BundleFailed::MSG_UNSUP)),
    };
    if let Err(e) = check {
        b.failed = true;
        return Err(e);
    }
    if full {
        b.failed = true;
        return Err(bf(BundleFailed::MSG_TOO_MANY));
    }
    b.msgs.push(Decoded {
        version,
        xid,
        message: (*ba.message).clone(),
    });
    Ok(())
}

/// Apply `msgs` all or nothing. On failure the failing message's error is
/// queued under its xid and `OFPBFC_MSG_FAILED` returned (for the commit).
fn commit(
    s: &mut Session,
    br: &mut Bridge,
    msgs: Vec<Decoded>,
    now: Instant,
) -> Result<bool, OfpError> {
    if msgs.is_empty() {
        return Ok(false);
    }
    let saved = br.save_rules();
    br.begin_deferred();
    let mut outs = Vec::new();
    let mut failed = None;
    for d in &msgs {
        let r = match &d.message {
            Message::FlowMod(fm) => handle::flow_mod(br, fm, now).map(drop),
            Message::GroupMod(gm) => handle::group_mod(br, gm, now),
            Message::PortMod(p) => handle::port_mod(br, p),
            Message::PacketOut(po) => handle::check_packet_out(po).and_then(|acts| {
                if handle::packet_out_port_ok(br, po.in_port) {
                    outs.push((po, acts));
                    Ok(())
                } else {
                    Err(OfpError::BadRequest(BadRequest::BAD_PORT))
                }
            }),
            _ => Err(bf(BundleFailed::MSG_UNSUP)),
        };
        if let Err(e) = r {
            failed = Some((d, e));
            break;
        }
    }
    if let Some((d, e)) = failed {
        // Back to the tables before the bundle; the datapath never saw
        // the change.
        br.restore_rules(saved, now);
        br.end_deferred(false);
        tracing::debug!(peer = %s.peer, xid = d.xid, "bundle message failed: {e}; bundle rolled back");
        s.send_error(e, d.xid, &handle::err_data(d));
        return Err(bf(BundleFailed::MSG_FAILED));
    }
    br.end_deferred(true);
    for (po, acts) in outs {
        if !br.packet_out_with(po.in_port, &po.metadata, &po.data, &acts, now) {
            tracing::debug!(peer = %s.peer, "bundled PACKET_OUT frame does not parse: not sent");
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::openflow::session::Conn;
    use crate::datapath::DatapathConfig;
    use nicflow_openflow::action::{Instruction, OfAction};
    use nicflow_openflow::msg::bundle::flags;
    use nicflow_openflow::msg::flow::{FlowModCommand as WireCmd, ANY, NO_BUFFER};
    use nicflow_openflow::msg::{self, Hello, OFP15_VERSION};

    fn session(now: Instant) -> Session {
        let mut s = Session::new(Conn::None, "t".into(), "ptcp:0".into(), now);
        s.feed(
            &msg::encode_to_vec(&Message::Hello(Hello::nicflow()), 1).unwrap(),
            now,
        );
        assert!(s.poll_message().is_none());
        assert_eq!(s.version, OFP15_VERSION);
        s.take_output();
        s
    }

    fn run(s: &mut Session, br: &mut Bridge, m: Message, xid: u32) -> Vec<Decoded> {
        let now = Instant::now();
        s.feed(&msg::encode_to_vec_as(&m, OFP15_VERSION, xid).unwrap(), now);
        while let Some(d) = s.poll_message() {
            handle::handle(s, br, d, now);
        }
        let out = s.take_output();
        let mut b = &out[..];
        let mut v = Vec::new();
        while !b.is_empty() {
            let (d, n) = msg::decode(b).unwrap();
            v.push(d);
            b = &b[n..];
        }
        v
    }

    fn ctl(id: u32, ctrl: BundleCtrlType, fl: u16) -> Message {
        Message::BundleControl(BundleControl {
            bundle_id: id,
            ctrl,
            flags: fl,
            properties: vec![],
        })
    }

    fn add(id: u32, m: Message) -> Message {
        Message::BundleAdd(BundleAdd {
            bundle_id: id,
            flags: flags::ALL,
            message: Box::new(m),
            properties: vec![],
        })
    }

    fn flow(table: u8, in_port: u32, acts: Vec<OfAction>, goto: Option<u8>) -> Message {
        let mut m = nicflow_flow::Match::catchall();
        m.set(nicflow_flow::Field::InPort, in_port.into(), u32::MAX.into());
        let mut instructions = vec![Instruction::ApplyActions(acts)];
        if let Some(t) = goto {
            instructions.push(Instruction::GotoTable(t));
        }
        Message::FlowMod(msg::FlowMod {
            cookie: 0,
            cookie_mask: 0,
            table_id: table,
            command: WireCmd::Add,
            idle_timeout: 0,
            hard_timeout: 0,
            priority: 10,
            buffer_id: NO_BUFFER,
            out_port: ANY,
            out_group: ANY,
            flags: 0,
            importance: 0,
            r#match: m,
            instructions,
        })
    }

    fn out(port: u32) -> Vec<OfAction> {
        vec![OfAction::Output { port, max_len: 0 }]
    }

    fn delete_all() -> Message {
        Message::FlowMod(msg::FlowMod {
            cookie: 0,
            cookie_mask: 0,
            table_id: 0xff,
            command: WireCmd::Delete,
            idle_timeout: 0,
            hard_timeout: 0,
            priority: 0,
            buffer_id: NO_BUFFER,
            out_port: ANY,
            out_group: ANY,
            flags: 0,
            importance: 0,
            r#match: nicflow_flow::Match::catchall(),
            instructions: vec![],
        })
    }

    fn err(d: &Decoded) -> Option<OfpError> {
        match &d.message {
            Message::Error(e) => Some(e.error),
            _ => None,
        }
    }

    fn frame() -> Vec<u8> {
        nicflow_packet::builder::FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([198, 18, 0, 1].into(), [198, 18, 0, 2].into())
            .udp(1000, 2000)
            .payload(b"bundle")
            .build()
    }

    fn mem_bridge() -> (Bridge, Vec<nicflow_port::mem::MemHandle>) {
        let mut br = Bridge::new("br0", DatapathConfig::default());
        let mut hs = Vec::new();
        for i in 1..=3 {
            let (p, h) = nicflow_port::mem::MemPort::new(&format!("p{i}"));
            br.add_port(Box::new(p)).unwrap();
            hs.push(h);
        }
        (br, hs)
    }

    #[test]
    fn a_committed_bundle_applies_everything_in_order() {
        let now = Instant::now();
        let (mut br, h) = mem_bridge();
        let mut s = session(now);
        assert!(
            matches!(&run(&mut s, &mut br, ctl(1, BundleCtrlType::OpenRequest, flags::ALL), 2)[..],
            [d] if d.message == ctl(1, BundleCtrlType::OpenReply, flags::ALL))
        );
        // Added, not applied: nothing forwards yet.
        assert!(run(&mut s, &mut br, add(1, flow(0, 1, out(2), None)), 3).is_empty());
        assert!(run(&mut s, &mut br, add(1, flow(0, 2, out(1), None)), 4).is_empty());
        assert!(br.dump_flows(now).is_empty());
        let revalidations = br.dp_stats().revalidations;
        let r = run(
            &mut s,
            &mut br,
            ctl(1, BundleCtrlType::CommitRequest, flags::ALL),
            5,
        );
        // One revalidation for the whole bundle: never a state in between.
        assert_eq!(br.dp_stats().revalidations, revalidations + 1);
        assert!(
            matches!(&r[..], [d] if d.xid == 5
            && d.message == ctl(1, BundleCtrlType::CommitReply, flags::ALL)),
            "{r:?}"
        );
        assert_eq!(br.dump_flows(now).len(), 2);
        h[0].inject(&frame());
        br.run_until_idle(now);
        assert_eq!(h[1].take_tx().len(), 1);
        // The bundle is gone after its commit.
        let r = run(
            &mut s,
            &mut br,
            ctl(1, BundleCtrlType::CommitRequest, flags::ALL),
            6,
        );
        assert_eq!(err(&r[0]), Some(bf(BundleFailed::BAD_ID)));
    }

    /// A failing message rolls back every one before it, names its own
    /// xid, and the datapath never sees the half-applied tables: the cached
    /// flow made before the bundle keeps forwarding without a new upcall.
    #[test]
    fn a_failing_bundle_changes_nothing_not_even_the_datapath() {
        let now = Instant::now();
        let (mut br, h) = mem_bridge();
        let mut s = session(now);
        br.add_flow_str("table=0,priority=10,in_port=p1,actions=output:p2", now)
            .unwrap();
        br.add_flow_str("table=1,priority=1,actions=drop", now)
            .unwrap();
        h[0].inject(&frame());
        br.run_until_idle(now);
        assert_eq!(h[1].take_tx().len(), 1);
        let upcalls = br.dp_stats().upcalls;
        let (fixed, removed) = (br.dp_stats().flows_fixed, br.dp_stats().flows_removed);
        let before = br.dump_flows_text(now);
        run(
            &mut s,
            &mut br,
            ctl(9, BundleCtrlType::OpenRequest, flags::ALL),
            2,
        );
        run(&mut s, &mut br, add(9, delete_all()), 3);
        run(&mut s, &mut br, add(9, flow(0, 1, out(3), None)), 4);
        // A group that does not exist: refused by the tables at commit
        // time.
        assert!(run(
            &mut s,
            &mut br,
            add(9, flow(0, 3, vec![OfAction::Group(77)], None)),
            5
        )
        .is_empty());
        run(&mut s, &mut br, add(9, flow(0, 2, out(1), None)), 6);
        let r = run(
            &mut s,
            &mut br,
            ctl(9, BundleCtrlType::CommitRequest, flags::ALL),
            7,
        );
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(r[0].xid, 5);
        assert_eq!(
            err(&r[0]),
            Some(OfpError::BadAction(
                nicflow_openflow::error::BadAction::BAD_OUT_GROUP
            ))
        );
        assert_eq!(r[1].xid, 7);
        assert_eq!(err(&r[1]), Some(bf(BundleFailed::MSG_FAILED)));
        assert!(r.iter().all(|d| d.version == OFP15_VERSION));
        assert_eq!(br.dump_flows_text(now), before);
        h[0].inject(&frame());
        br.run_until_idle(now);
        assert_eq!(h[1].take_tx().len(), 1);
        assert!(h[2].take_tx().is_empty());
        assert_eq!(
            br.dp_stats().upcalls,
            upcalls,
            "the cached flow was revalidated away"
        );
        // Never re-translated to a half-applied bundle's actions (what the
        // kernel engines would have run meanwhile).
        assert_eq!(
            (br.dp_stats().flows_fixed, br.dp_stats().flows_removed),
            (fixed, removed)
        );
        let before = br.dump_flows_text(now);
        // A message refused when added (goto_table backwards) gets its
        // error at once, and the bundle cannot commit without it.
        run(&mut s, &mut br, add(10, flow(0, 2, out(1), None)), 8);
        let r = run(&mut s, &mut br, add(10, flow(1, 1, out(3), Some(0))), 9);
        assert_eq!(
            (r[0].xid, err(&r[0])),
            (
                9,
                Some(OfpError::BadInstruction(
                    nicflow_openflow::error::BadInstruction::BAD_TABLE_ID
                ))
            )
        );
        let r = run(
            &mut s,
            &mut br,
            ctl(10, BundleCtrlType::CommitRequest, flags::ALL),
            10,
        );
        assert_eq!(err(&r[0]), Some(bf(BundleFailed::MSG_FAILED)));
        assert_eq!(br.dump_flows_text(now), before);
    }

    /// A `BUNDLE_ADD` the codec cannot read, sent first for its bundle,
    /// still fails the commit: the next good add must not open a clean
    /// bundle that commits without it.
    #[test]
    fn a_lost_first_message_fails_the_commit() {
        let now = Instant::now();
        let (mut br, _h) = mem_bridge();
        let mut s = session(now);
        let mut bad =
            msg::encode_to_vec_as(&add(5, flow(0, 1, out(2), None)), OFP15_VERSION, 20).unwrap();
        // The inner message's type: one no OpenFlow version has.
        bad[17] = 0xfe;
        s.feed(&bad, now);
        assert!(s.poll_message().is_none(), "the codec refuses it");
        s.take_output();
        let r = run(&mut s, &mut br, add(5, flow(0, 3, out(1), None)), 21);
        assert!(r.is_empty(), "the good add is taken: {r:?}");
        let r = run(
            &mut s,
            &mut br,
            ctl(5, BundleCtrlType::CommitRequest, flags::ALL),
            22,
        );
        assert_eq!(err(&r[0]), Some(bf(BundleFailed::MSG_FAILED)));
        assert_eq!(
            br.dump_flows_text(now).len(),
            0,
            "nothing of the bundle applied"
        );
    }

    #[test]
    fn control_errors_are_those_of_open_vswitch() {
        let now = Instant::now();
        let (mut br, _h) = mem_bridge();
        let mut s = session(now);
        let e = |r: Vec<Decoded>| err(&r[0]);
        use BundleCtrlType as T;
        assert_eq!(
            e(run(&mut s, &mut br, ctl(1, T::CommitRequest, 0), 2)),
            Some(bf(BundleFailed::BAD_ID))
        );
        assert_eq!(
            e(run(&mut s, &mut br, ctl(1, T::CloseRequest, 0), 2)),
            Some(bf(BundleFailed::BAD_ID))
        );
        assert_eq!(
            e(run(&mut s, &mut br, ctl(1, T::DiscardRequest, 0), 2)),
            Some(bf(BundleFailed::BAD_ID))
        );
        // Opening an open bundle discards it.
        run(&mut s, &mut br, ctl(1, T::OpenRequest, flags::ATOMIC), 3);
        assert_eq!(
            e(run(
                &mut s,
                &mut br,
                ctl(1, T::OpenRequest, flags::ATOMIC),
                4
            )),
            Some(bf(BundleFailed::BAD_ID))
        );
        assert_eq!(
            e(run(
                &mut s,
                &mut br,
                ctl(1, T::CommitRequest, flags::ATOMIC),
                5
            )),
            Some(bf(BundleFailed::BAD_ID))
        );
        // Closed: no more messages; closing again is an error.
        run(&mut s, &mut br, ctl(2, T::OpenRequest, flags::ALL), 6);
        let r = run(&mut s, &mut br, ctl(2, T::CloseRequest, flags::ALL), 7);
        assert_eq!(r[0].message, ctl(2, T::CloseReply, flags::ALL));
        assert_eq!(
            e(run(&mut s, &mut br, add(2, flow(0, 1, out(2), None)), 8)),
            Some(bf(BundleFailed::BUNDLE_CLOSED))
        );
        // Other flags at commit.
        run(&mut s, &mut br, ctl(3, T::OpenRequest, flags::ALL), 9);
        assert_eq!(
            e(run(
                &mut s,
                &mut br,
                ctl(3, T::CommitRequest, flags::ATOMIC),
                10
            )),
            Some(bf(BundleFailed::BAD_FLAGS))
        );
        // A meter in a bundle: unsupported, and the bundle cannot commit.
        let mm = Message::MeterMod(msg::MeterMod {
            command: 0,
            flags: 1,
            meter_id: 1,
            bands: vec![],
        });
        assert_eq!(
            e(run(&mut s, &mut br, add(4, mm), 11)),
            Some(bf(BundleFailed::MSG_UNSUP))
        );
        run(&mut s, &mut br, add(4, flow(0, 1, out(2), None)), 12);
        assert_eq!(
            e(run(
                &mut s,
                &mut br,
                ctl(4, T::CommitRequest, flags::ALL),
                13
            )),
            Some(bf(BundleFailed::MSG_FAILED))
        );
        assert!(br.dump_flows(now).is_empty());
        // Discard.
        run(&mut s, &mut br, add(5, flow(0, 1, out(2), None)), 14);
        let r = run(&mut s, &mut br, ctl(5, T::DiscardRequest, flags::ALL), 15);
        assert_eq!(r[0].message, ctl(5, T::DiscardReply, flags::ALL));
        assert!(br.dump_flows(now).is_empty());
        // Idle bundles time out.
        run(&mut s, &mut br, ctl(6, T::OpenRequest, flags::ALL), 16);
        s.probe(
            now + IDLE_TIMEOUT + Duration::from_secs(1),
            Duration::from_secs(3600),
        );
        let out = s.take_output();
        let (d, _) = msg::decode(&out).unwrap();
        assert_eq!((d.xid, err(&d)), (16, Some(bf(BundleFailed::TIMEOUT))));
        assert!(s.bundles.is_empty());
    }

    #[test]
    fn bundled_packet_outs_go_only_after_a_successful_commit() {
        let now = Instant::now();
        let (mut br, h) = mem_bridge();
        let mut s = session(now);
        let po = || {
            Message::PacketOut(msg::PacketOut {
                buffer_id: NO_BUFFER,
                in_port: nicflow_flow::ofp::CONTROLLER,
                metadata: nicflow_flow::Match::catchall(),
                actions: out(2),
                data: frame(),
            })
        };
        run(&mut s, &mut br, add(1, po()), 2);
        run(
            &mut s,
            &mut br,
            add(1, flow(0, 3, vec![OfAction::Group(77)], None)),
            3,
        );
        let r = run(
            &mut s,
            &mut br,
            ctl(1, BundleCtrlType::CommitRequest, flags::ALL),
            4,
        );
        assert_eq!(err(&r[1]), Some(bf(BundleFailed::MSG_FAILED)));
        assert!(h[1].take_tx().is_empty(), "sent from a failed bundle");
        run(&mut s, &mut br, add(2, po()), 5);
        let r = run(
            &mut s,
            &mut br,
            ctl(2, BundleCtrlType::CommitRequest, flags::ALL),
            6,
        );
        assert!(err(&r[0]).is_none(), "{r:?}");
        assert_eq!(h[1].take_tx().len(), 1);
    }
}
