//! The datapath's side of connection tracking: where a `ct` datapath action
//! meets the bridge's tracker, and how its verdict rides with the packet
//! into the next pass.
//!
//! The executor calls [`CtStage::track`] for a `ct` action; the verdict is
//! kept in the packet's [`CtMeta`] (not in its bytes), and a later `recirc`
//! hands a copy with that metadata back to the datapath, which writes it
//! into the recirculated pass's flow key ([`CtMeta::write_key`]) so the
//! megaflow cache and the slow path can match `ct_state`, `ct_zone`, ... A
//! packet already tracked in a zone is not fed to the state machine a second
//! time in that zone (OVS's `process_one_fast`): it keeps its verdict, and
//! only a commit's mark/label writes reach its connection.

use nicflow_conntrack::{state, Conntrack, CtRequest, CtResult, NatRewrite};
use nicflow_flow::FlowKey;
use nicflow_packet::buf::PacketBuf;
use std::net::IpAddr;
use std::time::Instant;

/// A packet's connection-tracking verdict between a `ct` action and the
/// pass it recirculates into.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtMeta {
    /// The last `ct` action's verdict; `None` while untracked. When it
    /// names a connection (`conn`), a second `ct` in the zone does not run
    /// the state machine again.
    pub result: Option<CtResult>,
}

impl CtMeta {
    /// Fill a recirculated pass's key with the verdict (zeros if none).
    pub fn write_key(&self, key: &mut FlowKey) {
        let Some(r) = self.result else {
            return;
        };
        key.ct_state = r.state;
        key.ct_zone = r.zone;
        key.ct_mark = r.mark;
        key.ct_label = r.label.to_be_bytes();
        if let Some(t) = r.orig {
            match (t.src, t.dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    key.ct_nw_src = u32::from(s);
                    key.ct_nw_dst = u32::from(d);
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    key.ct_ipv6_src = s.octets();
                    key.ct_ipv6_dst = d.octets();
                }
                _ => {}
            }
            key.ct_nw_proto = t.proto;
            key.ct_tp_src = t.sport;
            key.ct_tp_dst = t.dport;
        }
    }
}

/// A packet handed back for another pass: its buffer, its verdict, the
/// recirculation id.
pub type Recirculated = (PacketBuf, CtMeta, u32);

/// What the executor needs for `ct` and `recirc` actions on one packet.
pub struct CtStage<'a> {
    pub tracker: &'a mut Conntrack,
    pub meta: CtMeta,
    pub now: Instant,
    /// The pass number the copies this packet recirculates will make.
    pub depth: u32,
    /// Where recirculated copies go, with their pass number.
    pub recirc: &'a mut Vec<(Recirculated, u32)>,
}

impl CtStage<'_> {
    /// Run one `ct` action. `l3` starts at the IP header. Returns what
    /// NAT says to write into the packet.
    pub fn track(&mut self, dl_type: u16, l3: &[u8], req: &CtRequest) -> NatRewrite {
        if let Some(prev) = self.meta.result {
            if prev.zone == req.zone && prev.state & state::TRK != 0 && !req.force {
                if prev.state & state::INV != 0 && prev.conn.is_none() {
                    return NatRewrite::default();
                }
                // OVS's process_one_fast: no second pass through the state
                // machine; a commit's mark/label and a `nat` still apply.
                if let Some(r) = self.tracker.process_known(&prev, req) {
                    self.meta.result = Some(r);
                    return r.nat;
                }
            }
        }
        let r = self.tracker.process(dl_type, l3, req, self.now);
        self.meta.result = Some(r);
        r.nat
    }
}

/// A tracker and recirculation list of their own, for running the executor
/// outside a datapath (tests, benches).
pub struct CtScratch {
    pub tracker: Conntrack,
    pub recirc: Vec<(Recirculated, u32)>,
}

impl Default for CtScratch {
    fn default() -> Self {
        CtScratch {
            tracker: Conntrack::new(Default::default()),
            recirc: Vec::new(),
        }
    }
}

impl CtScratch {
    pub fn stage(&mut self, now: Instant) -> CtStage<'_> {
        CtStage {
            tracker: &mut self.tracker,
            meta: CtMeta::default(),
            now,
            depth: 1,
            recirc: &mut self.recirc,
        }
    }
}
