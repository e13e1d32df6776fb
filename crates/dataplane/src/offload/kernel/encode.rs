//! Datapath flow -> XDP map entries, or the reason it cannot be offloaded.
//!
//! Runs once per flow install (the slow path's rate), never per packet. The
//! contract with `bpf/xdp_dp.c`: for every frame the program parses and
//! every flow this accepts, the frame leaving the program is byte-for-byte
//! what `datapath::execute` would produce with the flow's `DpAction`s.
//! Whatever cannot keep that promise is refused here with a short, stable
//! reason string, and the flow stays in the userspace datapath:
//!
//! | reason | why |
//! | --- | --- |
//! | `ct:userspace` | the flow runs `ct`/`recirc`/`ct_clear`: the connection tracker is in userspace only |
//! | `ct:recirculated` | the flow is for a pass after `ct(table=N)` (its key has a `recirc_id`) |
//! | `field:<name>` (`field:ct_state`, `field:reg0`, `field:metadata`, `field:tun_metadata0`, ...) | the mask covers a field the program does not extract (metadata, registers, conntrack, Geneve options: XDP none, TC only `tun_metadata0`) |
//! | `field:nd_target`, `field:nd_sll`, `field:nd_tll` | IPv6 neighbor discovery fields: the program does not parse ND messages (`arp_sha`/`arp_tha` are taken for ARP flows only) |
//! | `action:set-nd` | rewriting an ND target or link-layer address option (`set_field:..->nd_target`, `nd_sll`, `nd_tll`) |
//! | `action:set-tun-metadata` | XDP: Geneve options are not pushed by the program (TC pushes them) |
//! | `action:controller` | a copy to the controller needs userspace |
//! | `action:meter-not-first` | a meter after another action (OpenFlow puts `meter:N` first; the program runs it before the loop) |
//! | `multiple-outputs` | flooding / cloning: XDP can send a frame to one place |
//! | `action-after-output` | the output must be the last action |
//! | `action:output-unmapped` | the output port has no devmap slot (not an XDP-capable port) |
//! | `action:push-vlan-tpid` | a TPID other than 0x8100 / 0x88a8 (userspace would re-parse differently) |
//! | `action:set-sctp-port` | SCTP port rewrite needs a CRC32c over the packet |
//! | `action:set-icmp` | ICMP type/code rewrite (`set_field:..->icmp_type`): the program's port rewrite does not cover ICMP |
//! | `action:push-vlan-before-tunnel` | a frame that grows before encapsulation could outgrow the MTU pre-check |
//! | `action:tun-opts` | hand-packed lists only: a tunnel output whose Geneve option chunks (`TunOpts`) are not right before it |
//! | `too-many-actions` | more than [`MAX_ACTIONS`] actions |
//! | `select:not-last` | a per-packet select group (`selection_method=rr`, `wrr`, `splb`) with actions after it |
//! | `select:nested` | a select inside a select's bucket |
//! | `select:too-many-buckets` | more than [`SELECT_MAX`] live buckets |
//! | `select:bucket-output` | a bucket that does not end in exactly one plain output (drops, floods, tunnel outputs) |
//! | `select:no-slot` | the engine has no `dp_select` slot for the group (more than [`super::layout::SELECT_SLOTS`] groups with offloaded flows at once) |
//!
//! The engine adds `mask-table-full` and `flow-map-full` when the maps are
//! full, the offload manager `meter:unknown` and `meter-map-full` for a
//! meter it cannot put in `dp_meters` ([`super::OffloadError::NotOffloadable`] carries all of them).

use super::layout::{
    flag, op, sel, tun_vni, DpKey, FlowValue, MeterBand, MeterEntry, RawAction, GENEVE_OPT_MAX,
    MAX_ACTIONS, METER_BANDS, METER_DROP, METER_REMARK, METER_UNIT, SELECT_MAX, TUN_OPT_CRIT_AT,
    TUN_OPT_LEN_AT,
};
use crate::datapath::{DpAction, DropReason};
use nicflow_flow::{FlowKey, FlowMask};
use nicflow_port::tunnel::TlvMapping;
use std::collections::{BTreeMap, HashMap};

/// A meter's `dp_meters` entry: the configuration of
/// `datapath::meter::DpMeter` in the program's units (full buckets, no
/// counters). `None` for a meter with more bands than the entry holds.
pub fn encode_meter(spec: &nicflow_ofctl::meter::MeterSpec) -> Option<MeterEntry> {
    use nicflow_ofctl::meter::BandType;
    if spec.bands.len() > METER_BANDS {
        return None;
    }
    let mut e = MeterEntry {
        n_bands: spec.bands.len() as u32,
        pktps: spec.pktps().into(),
        ..Default::default()
    };
    for (b, s) in e.bands.iter_mut().zip(&spec.bands) {
        // No burst: one second's worth, as userspace (and OVS).
        let burst = if s.burst_size == 0 {
            s.rate
        } else {
            s.burst_size
        };
        let max = u64::from(burst) * METER_UNIT;
        let rate = u64::from(s.rate);
        let (kind, prec_level) = match s.kind {
            BandType::Drop => (METER_DROP, 0),
            BandType::DscpRemark { prec_level } => (METER_REMARK, prec_level.into()),
        };
        *b = MeterBand {
            bucket: max,
            max,
            rate,
            fill_ns: if rate == 0 {
                u64::MAX
            } else {
                max.div_ceil(rate)
            },
            packets: 0,
            bytes: 0,
            kind,
            prec_level,
        };
    }
    Some(e)
}

/// Why a flow stays in userspace. `reason` is short and stable (it is
/// meant for counters and logs): see the module docs for the list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("not offloadable to XDP: {reason}")]
pub struct NotOffloadable {
    pub reason: &'static str,
}

fn no(reason: &'static str) -> NotOffloadable {
    NotOffloadable { reason }
}

/// nicflow port number -> slot of the program's `dp_tx_ports` devmap
/// (which holds the port's ifindex). `None`: the port cannot be reached
/// from XDP (tap, pcap, ...).
pub trait PortSlots {
    fn slot(&self, port: u32) -> Option<u32>;
    /// If `port` is a tunnel port the program can encapsulate for: its
    /// slot in `dp_tun_tx`.
    fn tunnel(&self, _port: u32) -> Option<TunnelSlot> {
        None
    }
    /// The `dp_select` slot of per-packet select group `group`, if the
    /// engine has given it one (`None`: the flow stays in userspace).
    fn select_slot(&self, _group: u32) -> Option<u32> {
        None
    }
}

/// An offloadable tunnel port as the encoder sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunnelSlot {
    /// Index of its header template in `dp_tun_tx`.
    pub slot: u32,
    /// `key=flow`: the VNI comes from the flow, not the template.
    pub flow_key: bool,
    /// Its Geneve TLV map (empty for VXLAN): which `tun_metadata` slots
    /// go out as which options, and which received options fill them.
    pub tlv: TunnelTlv,
}

/// A tunnel port's TLV map, by value (at most one entry per
/// `tun_metadata` slot, so eight).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunnelTlv {
    n: usize,
    map: [TlvMapping; 8],
}

impl Default for TunnelTlv {
    fn default() -> Self {
        TunnelTlv {
            n: 0,
            map: [TlvMapping {
                class: 0,
                typ: 0,
                slot: 0,
            }; 8],
        }
    }
}

impl TunnelTlv {
    /// `map`'s first eight entries (a port's map has no more).
    pub fn new(map: &[TlvMapping]) -> TunnelTlv {
        let mut t = TunnelTlv::default();
        for (d, m) in t.map.iter_mut().zip(map) {
            *d = *m;
            t.n += 1;
        }
        t
    }

    pub fn as_slice(&self) -> &[TlvMapping] {
        &self.map[..self.n]
    }

    /// Does a received option fill `tun_metadata<slot>`?
    pub fn maps_slot(&self, slot: usize) -> bool {
        self.as_slice().iter().any(|m| usize::from(m.slot) == slot)
    }
}

/// Where an encapsulating output takes the VNI from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelVni {
    /// The port's fixed key.
    Template,
    /// The flow's `set_tunnel` value.
    Set(u32),
    /// The frame's `tun_id` (a `key=flow` port without `set_tunnel`: the
    /// VNI it arrived with, or 0).
    FromKey,
}

impl<F: Fn(u32) -> Option<u32>> PortSlots for F {
    fn slot(&self, port: u32) -> Option<u32> {
        self(port)
    }
}

impl<S: std::hash::BuildHasher> PortSlots for HashMap<u32, u32, S> {
    fn slot(&self, port: u32) -> Option<u32> {
        self.get(&port).copied()
    }
}

impl PortSlots for BTreeMap<u32, u32> {
    fn slot(&self, port: u32) -> Option<u32> {
        self.get(&port).copied()
    }
}

/// A flow ready for the maps: masked key, mask, and value (counters zero).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedFlow {
    /// `key & mask`.
    pub key: DpKey,
    pub mask: DpKey,
    pub value: FlowValue,
    /// A per-packet select flow's buckets (its value holds only the
    /// `SELECT`): bucket b's flow, the flow's own actions then the
    /// bucket's, stored under the flow's map key with `pad` = 1 + b.
    pub buckets: Vec<FlowValue>,
}

/// One XDP action, before packing into a [`RawAction`]. A superset of what
/// [`encode`] produces from `DpAction`s: `DecTtl` exists for flows built by
/// hand (the slow path emits `SetTtl` with the value it decided, since
/// `nw_ttl` is in the flow's mask).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpAction {
    /// Redirect through devmap slot `slot`; must be last.
    Output {
        slot: u32,
    },
    /// XDP_DROP; `reason` is informational (a `DropReason` index).
    Drop {
        reason: u16,
    },
    SetEthSrc([u8; 6]),
    SetEthDst([u8; 6]),
    SetIpv4Src(u32),
    SetIpv4Dst(u32),
    SetIpv6Src([u8; 16]),
    SetIpv6Dst([u8; 16]),
    SetTos(u8),
    SetTtl(u8),
    /// Decrement TTL / hop limit; a frame arriving with <= 1 goes to
    /// userspace untouched.
    DecTtl,
    SetTpSrc(u16),
    SetTpDst(u16),
    PushVlan {
        tpid: u16,
        tci: u16,
    },
    PopVlan,
    SetVlanTci(u16),
    SetArpSpa(u32),
    SetArpTpa(u32),
    SetArpSha([u8; 6]),
    SetArpTha([u8; 6]),
    /// Push the outer header of tunnel slot `slot` (with `opts` bytes of
    /// Geneve options from the `TunOpts` right before it, the header's C
    /// bit set when `critical`) and redirect to its underlay; must be
    /// last.
    TunnelOutput {
        slot: u32,
        vni: TunnelVni,
        opts: u8,
        critical: bool,
    },
    /// Bytes `16 * chunk ..` of the options block of the `TunnelOutput`
    /// that follows (TC).
    TunOpts {
        chunk: u16,
        data: [u8; 16],
    },
    /// Meter the frame with `dp_meters[id]`; must be first.
    Meter {
        id: u32,
    },
    /// Choose one of `n` buckets per packet with `dp_select[slot]`'s
    /// rotation (`method`: one of [`super::layout::sel`]) and run that
    /// bucket's flow ([`EncodedFlow::buckets`]). A select flow's only
    /// action.
    Select {
        slot: u32,
        method: u16,
        n: u8,
    },
}

impl XdpAction {
    fn raw(&self) -> RawAction {
        let mut r = RawAction::default();
        let mac = |r: &mut RawAction, m: &[u8; 6]| r.data[..6].copy_from_slice(m);
        match *self {
            XdpAction::Output { slot } => {
                r.op = op::OUTPUT;
                r.arg32 = slot;
            }
            XdpAction::Drop { reason } => {
                r.op = op::DROP;
                r.arg16 = reason;
            }
            XdpAction::Meter { id } => {
                r.op = op::METER;
                r.arg32 = id;
            }
            XdpAction::Select { slot, method, n } => {
                r.op = op::SELECT;
                r.arg32 = slot;
                r.arg16 = method | u16::from(n) << 8;
            }
            XdpAction::SetEthSrc(m) => {
                r.op = op::SET_ETH_SRC;
                mac(&mut r, &m);
            }
            XdpAction::SetEthDst(m) => {
                r.op = op::SET_ETH_DST;
                mac(&mut r, &m);
            }
            XdpAction::SetIpv4Src(a) => {
                r.op = op::SET_IPV4_SRC;
                r.arg32 = a;
            }
            XdpAction::SetIpv4Dst(a) => {
                r.op = op::SET_IPV4_DST;
                r.arg32 = a;
            }
            XdpAction::SetIpv6Src(a) => {
                r.op = op::SET_IPV6_SRC;
                r.data = a;
            }
            XdpAction::SetIpv6Dst(a) => {
                r.op = op::SET_IPV6_DST;
                r.data = a;
            }
            XdpAction::SetTos(t) => {
                r.op = op::SET_TOS;
                r.arg16 = t.into();
            }
            XdpAction::SetTtl(t) => {
                r.op = op::SET_TTL;
                r.arg16 = t.into();
            }
            XdpAction::DecTtl => r.op = op::DEC_TTL,
            XdpAction::SetTpSrc(p) => {
                r.op = op::SET_TP_SRC;
                r.arg16 = p;
            }
            XdpAction::SetTpDst(p) => {
                r.op = op::SET_TP_DST;
                r.arg16 = p;
            }
            XdpAction::PushVlan { tpid, tci } => {
                r.op = op::PUSH_VLAN;
                r.arg32 = tpid.into();
                r.arg16 = tci;
            }
            XdpAction::PopVlan => r.op = op::POP_VLAN,
            XdpAction::SetVlanTci(t) => {
                r.op = op::SET_VLAN_TCI;
                r.arg16 = t;
            }
            XdpAction::SetArpSpa(a) => {
                r.op = op::SET_ARP_SPA;
                r.arg32 = a;
            }
            XdpAction::SetArpTpa(a) => {
                r.op = op::SET_ARP_TPA;
                r.arg32 = a;
            }
            XdpAction::SetArpSha(m) => {
                r.op = op::SET_ARP_SHA;
                mac(&mut r, &m);
            }
            XdpAction::SetArpTha(m) => {
                r.op = op::SET_ARP_THA;
                mac(&mut r, &m);
            }
            XdpAction::TunOpts { chunk, data } => {
                r.op = op::TUN_OPTS;
                r.arg16 = chunk;
                r.data = data;
            }
            XdpAction::TunnelOutput {
                slot,
                vni,
                opts,
                critical,
            } => {
                r.op = op::TUNNEL_OUTPUT;
                r.arg32 = slot;
                r.data[TUN_OPT_LEN_AT] = opts;
                r.data[TUN_OPT_CRIT_AT] = if critical { 0x40 } else { 0 };
                r.arg16 = match vni {
                    TunnelVni::Template => tun_vni::TEMPLATE,
                    TunnelVni::Set(v) => {
                        // The program reads it as a native u32.
                        r.data[..4].copy_from_slice(&v.to_ne_bytes());
                        tun_vni::ACTION
                    }
                    TunnelVni::FromKey => tun_vni::KEY,
                };
            }
        }
        r
    }

    /// Decode a packed action (for dumps and tests).
    pub fn from_raw(r: &RawAction) -> Option<XdpAction> {
        let mut m = [0u8; 6];
        m.copy_from_slice(&r.data[..6]);
        Some(match r.op {
            op::OUTPUT => XdpAction::Output { slot: r.arg32 },
            op::DROP => XdpAction::Drop { reason: r.arg16 },
            op::METER => XdpAction::Meter { id: r.arg32 },
            op::SELECT => XdpAction::Select {
                slot: r.arg32,
                method: r.arg16 & 0xff,
                n: (r.arg16 >> 8) as u8,
            },
            op::SET_ETH_SRC => XdpAction::SetEthSrc(m),
            op::SET_ETH_DST => XdpAction::SetEthDst(m),
            op::SET_IPV4_SRC => XdpAction::SetIpv4Src(r.arg32),
            op::SET_IPV4_DST => XdpAction::SetIpv4Dst(r.arg32),
            op::SET_IPV6_SRC => XdpAction::SetIpv6Src(r.data),
            op::SET_IPV6_DST => XdpAction::SetIpv6Dst(r.data),
            op::SET_TOS => XdpAction::SetTos(r.arg16 as u8),
            op::SET_TTL => XdpAction::SetTtl(r.arg16 as u8),
            op::DEC_TTL => XdpAction::DecTtl,
            op::SET_TP_SRC => XdpAction::SetTpSrc(r.arg16),
            op::SET_TP_DST => XdpAction::SetTpDst(r.arg16),
            op::PUSH_VLAN => XdpAction::PushVlan {
                tpid: r.arg32 as u16,
                tci: r.arg16,
            },
            op::POP_VLAN => XdpAction::PopVlan,
            op::SET_VLAN_TCI => XdpAction::SetVlanTci(r.arg16),
            op::SET_ARP_SPA => XdpAction::SetArpSpa(r.arg32),
            op::SET_ARP_TPA => XdpAction::SetArpTpa(r.arg32),
            op::SET_ARP_SHA => XdpAction::SetArpSha(m),
            op::SET_ARP_THA => XdpAction::SetArpTha(m),
            op::TUN_OPTS => XdpAction::TunOpts {
                chunk: r.arg16,
                data: r.data,
            },
            op::TUNNEL_OUTPUT => XdpAction::TunnelOutput {
                slot: r.arg32,
                opts: r.data[TUN_OPT_LEN_AT],
                critical: r.data[TUN_OPT_CRIT_AT] != 0,
                vni: match r.arg16 {
                    tun_vni::TEMPLATE => TunnelVni::Template,
                    tun_vni::ACTION => TunnelVni::Set(u32::from_ne_bytes([
                        r.data[0], r.data[1], r.data[2], r.data[3],
                    ])),
                    tun_vni::KEY => TunnelVni::FromKey,
                    _ => return None,
                },
            },
            _ => return None,
        })
    }
}

/// Pack an XDP action list into a map value (counters zero), checking the
/// structural rules the program relies on: at most [`MAX_ACTIONS`], one
/// output and only as the last action, no `SetTtl` before a `DecTtl` (the
/// TTL pre-check looks at the received frame).
pub fn pack(actions: &[XdpAction]) -> Result<FlowValue, NotOffloadable> {
    if actions.len() > MAX_ACTIONS {
        return Err(no("too-many-actions"));
    }
    let mut v = FlowValue::default();
    let mut set_ttl = false;
    for (i, a) in actions.iter().enumerate() {
        match a {
            XdpAction::Select { n, .. } => {
                if actions.len() != 1 {
                    return Err(no("select:not-last"));
                }
                if *n == 0 || usize::from(*n) > SELECT_MAX {
                    return Err(no("select:too-many-buckets"));
                }
                v.flags |= flag::SELECT;
            }
            XdpAction::Output { slot } => {
                if i + 1 != actions.len() {
                    return Err(no("action-after-output"));
                }
                v.flags |= flag::OUTPUT;
                v.out_slot = *slot;
            }
            XdpAction::TunnelOutput { slot, opts, .. } => {
                if i + 1 != actions.len() {
                    return Err(no("action-after-output"));
                }
                // The options right before it, chunk by chunk.
                let n = usize::from(*opts).div_ceil(16);
                let ok = usize::from(*opts) <= GENEVE_OPT_MAX
                    && opts % 4 == 0
                    && n <= i
                    && actions[i - n..i].iter().enumerate().all(
                        |(c, a)| matches!(a, XdpAction::TunOpts { chunk, .. } if usize::from(*chunk) == c),
                    );
                if !ok {
                    return Err(no("action:tun-opts"));
                }
                if actions[..i]
                    .iter()
                    .any(|a| matches!(a, XdpAction::PushVlan { .. }))
                {
                    return Err(no("action:push-vlan-before-tunnel"));
                }
                v.flags |= flag::TUNNEL;
                v.out_slot = *slot;
            }
            XdpAction::Meter { .. } if i != 0 => return Err(no("action:meter-not-first")),
            XdpAction::SetTtl(_) => set_ttl = true,
            XdpAction::DecTtl => {
                if set_ttl {
                    return Err(no("action:dec-ttl-after-set-ttl"));
                }
                v.flags |= flag::DEC_TTL;
            }
            XdpAction::SetTpSrc(_) | XdpAction::SetTpDst(_) => v.flags |= flag::SET_TP,
            XdpAction::PushVlan { tpid, .. } if !matches!(tpid, 0x8100 | 0x88a8) => {
                return Err(no("action:push-vlan-tpid"));
            }
            _ => {}
        }
        v.actions[i] = a.raw();
    }
    v.n_actions = actions.len() as u8;
    Ok(v)
}

/// Key fields the program does not extract, with their reason strings.
/// A mask bit on any of them refuses the flow. `md_from`: the first
/// `tun_metadata` slot not in the key (TC has slot 0, XDP none).
fn unsupported_field(m: &FlowKey, md_from: usize) -> Option<&'static str> {
    const REGS: [&str; 8] = [
        "field:reg0",
        "field:reg1",
        "field:reg2",
        "field:reg3",
        "field:reg4",
        "field:reg5",
        "field:reg6",
        "field:reg7",
    ];
    if m.metadata != 0 {
        return Some("field:metadata");
    }
    const MD: [&str; 8] = [
        "field:tun_metadata0",
        "field:tun_metadata1",
        "field:tun_metadata2",
        "field:tun_metadata3",
        "field:tun_metadata4",
        "field:tun_metadata5",
        "field:tun_metadata6",
        "field:tun_metadata7",
    ];
    if let Some(i) = (md_from..8).find(|&i| m.tun_metadata[i] != 0) {
        return Some(MD[i]);
    }
    if let Some(i) = m.regs.iter().position(|r| *r != 0) {
        return Some(REGS[i]);
    }
    if m.regs_hi.iter().any(|r| *r != 0) {
        return Some("field:reg8-15");
    }
    if m.ct_state != 0 {
        return Some("field:ct_state");
    }
    if m.ct_zone != 0 {
        return Some("field:ct_zone");
    }
    if m.ct_mark != 0 {
        return Some("field:ct_mark");
    }
    if m.ct_label != [0; 16] {
        return Some("field:ct_label");
    }
    if m.pkt_mark != 0 {
        return Some("field:pkt_mark");
    }
    if m.nd_target != [0; 16] {
        return Some("field:nd_target");
    }
    if m.ct_nw_src | m.ct_nw_dst != 0
        || m.ct_ipv6_src != [0; 16]
        || m.ct_ipv6_dst != [0; 16]
        || m.ct_tp_src | m.ct_tp_dst != 0
        || m.ct_nw_proto != 0
    {
        return Some("field:ct_tuple");
    }
    None
}

/// Translate one datapath flow for the XDP engine. `ports` maps output
/// port numbers to devmap slots. The result's key is masked; the engine
/// assigns the mask slot.
pub fn encode(
    key: &FlowKey,
    mask: &FlowMask,
    actions: &[DpAction],
    ports: &dyn PortSlots,
) -> Result<EncodedFlow, NotOffloadable> {
    encode_engine(key, mask, actions, ports, false)
}

/// [`encode`] for either engine: `tc` adds Geneve options (the key's
/// `tun_metadata0` and options pushed on encapsulation), which only the TC
/// program handles.
fn encode_engine(
    key: &FlowKey,
    mask: &FlowMask,
    actions: &[DpAction],
    ports: &dyn PortSlots,
    tc: bool,
) -> Result<EncodedFlow, NotOffloadable> {
    // Connection tracking runs in userspace only (no kernel tracker yet):
    // flows that call it and the passes after it stay with it. Said before
    // the ct fields their masks touch, which follow from this.
    if key.recirc_id != 0 {
        return Err(no("ct:recirculated"));
    }
    if actions.iter().any(|a| {
        matches!(
            a,
            DpAction::Ct { .. } | DpAction::Recirc(_) | DpAction::CtClear
        )
    }) {
        return Err(no("ct:userspace"));
    }
    // Registers, metadata and the tracker's fields are zero in every packet
    // a kernel engine sees (set only inside the slow path, or by a `ct` and
    // its recirculation, which stay in userspace). A flow that needs them
    // zero holds for all its kernel packets, so those bits leave its kernel
    // match; one that needs a non-zero value stays in userspace.
    let mut kmask = *mask;
    let k = key.masked(mask);
    let mut stripped = k;
    stripped.clear_userspace_only();
    if stripped == k {
        kmask.0.clear_userspace_only();
    }
    // The ND fields (`nd_target`, and `nd_sll`/`nd_tll` in `arp_sha`/
    // `arp_tha`) are zero in every packet that is not an IPv6 neighbor
    // solicitation or advertisement. A flow whose match rules that out
    // (another ethertype, another IP protocol, another ICMPv6 type), and
    // that needs them zero, holds for its kernel packets as it is: those
    // bits leave its kernel match. The classifier unwildcards them in
    // megaflows of any protocol when a table has ND or ARP rules.
    let cannot_be_nd = (kmask.0.dl_type == 0xffff && key.dl_type != 0x86dd)
        || (kmask.0.nw_proto == 0xff && key.nw_proto != nicflow_packet::IPPROTO_ICMPV6)
        || (kmask.0.tp_src == 0xffff && !matches!(key.tp_src, 135 | 136));
    let not_arp = !(kmask.0.dl_type == 0xffff && key.dl_type == 0x0806);
    if cannot_be_nd && not_arp {
        let k = key.masked(&kmask);
        if k.nd_target == [0; 16] && k.arp_sha == [0; 6] && k.arp_tha == [0; 6] {
            kmask.0.nd_target = [0; 16];
            kmask.0.arp_sha = [0; 6];
            kmask.0.arp_tha = [0; 6];
        }
    }
    // Geneve options (TC): tun_metadata0 is in the kernel key. The other
    // slots are zero in every frame the program sees from a plain port,
    // and from a tunnel port whose TLV map names no option for them: a
    // flow that needs them zero there holds as it is, and those bits
    // leave its kernel match (ovn's megaflows look at the metadata of the
    // tunnel port's rules whatever the port).
    if tc {
        let tlv = ports.tunnel(key.in_port).map(|t| t.tlv);
        for i in 1..8 {
            let filled = tlv.is_some_and(|t| t.maps_slot(i));
            if !filled && key.tun_metadata[i] & kmask.0.tun_metadata[i] == 0 {
                kmask.0.tun_metadata[i] = 0;
            }
        }
    }
    let mask = &kmask;
    if let Some(reason) = unsupported_field(&mask.0, usize::from(tc)) {
        return Err(no(reason));
    }
    // `arp_sha`/`arp_tha` hold an IPv6 ND message's link-layer address
    // options in userspace (`nd_sll`/`nd_tll`); the program fills them for
    // ARP frames only, so a flow that is not exactly ARP and looks at them
    // would match other frames in the kernel than in userspace.
    let arp = mask.0.dl_type == 0xffff && key.dl_type == 0x0806;
    if !arp && mask.0.arp_sha != [0; 6] {
        return Err(no("field:nd_sll"));
    }
    if !arp && mask.0.arp_tha != [0; 6] {
        return Err(no("field:nd_tll"));
    }
    let sctp = mask.0.nw_proto == 0xff && key.nw_proto == nicflow_packet::IPPROTO_SCTP;
    // ICMP type/code live in tp_src/tp_dst: userspace rewrites them (with
    // the ICMP checksum); the program's port rewrite does not. With the
    // protocol open in the mask, the program's SET_TP pre-check punts ICMP
    // frames (as SCTP ones).
    let icmp = mask.0.nw_proto == 0xff && matches!(key.nw_proto, 1 | 58);
    let mut out: Vec<XdpAction> = Vec::with_capacity(actions.len());
    let cx = ListCx {
        ports,
        tc,
        icmp,
        sctp,
    };
    let mut buckets = Vec::new();
    encode_list(
        actions,
        &cx,
        &mut ListState::default(),
        &mut out,
        Some(&mut buckets),
    )?;
    let mut value = pack(&out)?;
    // The select flow's own pre-checks are its buckets': the program runs
    // them on the flow it looked up, before choosing.
    for b in &buckets {
        value.flags |= b.flags & (flag::DEC_TTL | flag::SET_TP);
    }
    let m = DpKey::from_flow_key(&mask.0);
    Ok(EncodedFlow {
        key: DpKey::from_flow_key(key).masked(&m),
        mask: m,
        value,
        buckets,
    })
}

/// What [`encode_list`] needs to know of the flow.
struct ListCx<'a> {
    ports: &'a dyn PortSlots,
    tc: bool,
    /// The flow is ICMP / SCTP only (its port rewrites are refused).
    icmp: bool,
    sctp: bool,
}

/// What the actions so far did, as later ones need it.
#[derive(Clone, Copy, Default)]
struct ListState {
    outputs: usize,
    /// The last `set_tunnel` so far: the VNI a `key=flow` port sends with.
    set_tun: Option<u64>,
    /// tun_metadata slots set so far (TC), as the executor keeps them in
    /// the frame's tunnel metadata for a Geneve output.
    md: [u32; 8],
    md_present: u8,
}

/// Encode one action list into `out`. `buckets`: where a select's bucket
/// flows go (`None` inside a bucket: no select there).
fn encode_list(
    actions: &[DpAction],
    cx: &ListCx<'_>,
    st: &mut ListState,
    out: &mut Vec<XdpAction>,
    mut buckets: Option<&mut Vec<FlowValue>>,
) -> Result<(), NotOffloadable> {
    for (at, a) in actions.iter().enumerate() {
        if st.outputs > 0 {
            // Anything after the output: another output is a clone/flood,
            // anything else would have to happen after the frame left.
            return Err(no(if matches!(a, DpAction::Output(_)) {
                "multiple-outputs"
            } else {
                "action-after-output"
            }));
        }
        let x = match *a {
            DpAction::Output(p) => {
                st.outputs += 1;
                if let Some(t) = cx.ports.tunnel(p) {
                    let vni = match (t.flow_key, st.set_tun) {
                        (false, _) => TunnelVni::Template,
                        (true, Some(v)) => TunnelVni::Set(v as u32 & 0xff_ffff),
                        (true, None) => TunnelVni::FromKey,
                    };
                    // The options the tunnel port sends, built by the
                    // port's own function, in TUN_OPTS chunks before it.
                    let mut buf = [0u8; nicflow_port::tunnel::GENEVE_OPTIONS_MAX];
                    let n = nicflow_port::tunnel::geneve_options(
                        t.tlv.as_slice(),
                        st.md_present,
                        &st.md,
                        &mut buf,
                    );
                    let opts = &buf[..n];
                    for (c, chunk) in opts.chunks(16).enumerate() {
                        let mut data = [0u8; 16];
                        data[..chunk.len()].copy_from_slice(chunk);
                        out.push(XdpAction::TunOpts {
                            chunk: c as u16,
                            data,
                        });
                    }
                    let critical =
                        nicflow_packet::tunnel::geneve_options(opts).any(|o| o.critical());
                    XdpAction::TunnelOutput {
                        slot: t.slot,
                        vni,
                        opts: n as u8,
                        critical,
                    }
                } else {
                    let slot = cx.ports.slot(p).ok_or(no("action:output-unmapped"))?;
                    XdpAction::Output { slot }
                }
            }
            DpAction::Drop(reason) => {
                let idx = DropReason::ALL
                    .iter()
                    .position(|d| *d == reason)
                    .unwrap_or(0);
                out.push(XdpAction::Drop { reason: idx as u16 });
                // userspace stops at a Drop: later actions never run.
                break;
            }
            DpAction::Controller { .. } => return Err(no("action:controller")),
            DpAction::Meter(id) => XdpAction::Meter { id },
            DpAction::Ct { .. } | DpAction::Recirc(_) | DpAction::CtClear => {
                return Err(no("ct:userspace"))
            }
            DpAction::SetTunnelMetadata { slot, value } if cx.tc => {
                // Metadata only, as set_tunnel: it reaches the wire as a
                // Geneve option of a tunnel output.
                let i = usize::from(slot & 7);
                st.md[i] = value;
                st.md_present |= 1 << i;
                continue;
            }
            DpAction::SetTunnelMetadata { .. } => return Err(no("action:set-tun-metadata")),
            DpAction::SetTunnelId(v) => {
                // Metadata only: it reaches the wire through a tunnel
                // output's VNI (above), nowhere else.
                st.set_tun = Some(v);
                continue;
            }
            DpAction::SetEthSrc(m) => XdpAction::SetEthSrc(m),
            DpAction::SetEthDst(m) => XdpAction::SetEthDst(m),
            DpAction::SetIpv4Src(v) => XdpAction::SetIpv4Src(v),
            DpAction::SetIpv4Dst(v) => XdpAction::SetIpv4Dst(v),
            DpAction::SetIpv6Src(v) => XdpAction::SetIpv6Src(v),
            DpAction::SetIpv6Dst(v) => XdpAction::SetIpv6Dst(v),
            DpAction::SetArpSpa(v) => XdpAction::SetArpSpa(v),
            DpAction::SetArpTpa(v) => XdpAction::SetArpTpa(v),
            DpAction::SetArpSha(m) => XdpAction::SetArpSha(m),
            DpAction::SetArpTha(m) => XdpAction::SetArpTha(m),
            DpAction::SetArpOp(_) => return Err(no("action:set-arp-op")),
            DpAction::SetNdTarget(_) | DpAction::SetNdSll(_) | DpAction::SetNdTll(_) => {
                return Err(no("action:set-nd"))
            }
            DpAction::SetTos(t) => XdpAction::SetTos(t),
            DpAction::SetTtl(t) => XdpAction::SetTtl(t),
            DpAction::SetTpSrc(_) | DpAction::SetTpDst(_) if cx.icmp => {
                return Err(no("action:set-icmp"));
            }
            DpAction::SetTpSrc(_) | DpAction::SetTpDst(_) if cx.sctp => {
                return Err(no("action:set-sctp-port"));
            }
            DpAction::SetTpSrc(p) => XdpAction::SetTpSrc(p),
            DpAction::SetTpDst(p) => XdpAction::SetTpDst(p),
            DpAction::PushVlan { tpid, tci } => XdpAction::PushVlan { tpid, tci },
            DpAction::PopVlan => XdpAction::PopVlan,
            DpAction::SetVlanTci(t) => XdpAction::SetVlanTci(t),
            DpAction::Select {
                group,
                method,
                buckets: ref buckets_of,
            } => {
                let Some(values) = buckets.as_deref_mut() else {
                    return Err(no("select:nested"));
                };
                encode_select(
                    group,
                    method,
                    buckets_of,
                    at + 1 == actions.len(),
                    cx,
                    st,
                    out,
                    values,
                )?;
                continue;
            }
        };
        out.push(x);
    }
    Ok(())
}

/// A per-packet select, the flow's last action: the flow's own list becomes
/// the one `SELECT`, and each bucket a flow of its own (into `values`): the
/// actions before the select, then the bucket's, from the state those left,
/// ending in one plain output. At most [`SELECT_MAX`] buckets.
#[allow(clippy::too_many_arguments)]
fn encode_select(
    group: u32,
    method: crate::datapath::action::SelectMethod,
    buckets: &[crate::datapath::action::SelectBucket],
    last: bool,
    cx: &ListCx<'_>,
    st: &mut ListState,
    out: &mut Vec<XdpAction>,
    values: &mut Vec<FlowValue>,
) -> Result<(), NotOffloadable> {
    use crate::datapath::action::SelectMethod;
    if !last {
        return Err(no("select:not-last"));
    }
    if buckets.is_empty() || buckets.len() > SELECT_MAX {
        return Err(no("select:too-many-buckets"));
    }
    let slot = cx.ports.select_slot(group).ok_or(no("select:no-slot"))?;
    for bucket in buckets {
        let mut list = out.clone();
        let mut bs = *st;
        encode_list(&bucket.actions, cx, &mut bs, &mut list, None)?;
        if !matches!(list.last(), Some(XdpAction::Output { .. })) || bs.outputs != 1 {
            // A bucket that drops, or sends into a tunnel: the program
            // pre-checks plain outputs only here.
            return Err(no("select:bucket-output"));
        }
        values.push(pack(&list)?);
    }
    out.clear();
    out.push(XdpAction::Select {
        slot,
        method: match method {
            SelectMethod::RoundRobin => sel::RR,
            SelectMethod::Weighted => sel::WRR,
            SelectMethod::Splb => sel::SPLB,
        },
        n: buckets.len() as u8,
    });
    st.outputs += 1;
    Ok(())
}

/// [`encode`] for the TC engine (`bpf/tc_dp.c`). Same encoding, plus
/// Geneve options: `tun_metadata0` is matched (filled from received
/// options through the tunnel port's TLV map; `tun_metadata1..7` only
/// where they are zero in every kernel frame), and `set_field:..->
/// tun_metadataN` before a tunnel output pushes the options the tunnel
/// port would (`TUN_OPTS` actions). The TC program leaves out ARP rewrites (a `CHECKSUM_COMPLETE` sum would have to
/// follow them): `tc:arp-rewrite`. Tunnels: `ports.tunnel` names the TC
/// engine's tunnel ports (underlay on a TC port). Frames from other ports
/// carry no tunnel metadata (the key's `tun_*` are 0 there), so a flow that
/// needs a non-zero one is refused (`tc:tunnel`); a flow from a tunnel port
/// into a tunnel port is refused too (`tc:tunnel-to-tunnel`: a frame
/// decapsulated there is still marked encapsulated, and the kernel keeps
/// one level of GSO tunnel). Tagged frames from or into a tunnel are
/// refused too (`tc:tunnel-inner-vlan`, `tc:tagged-into-tunnel`).
pub fn encode_tc(
    key: &FlowKey,
    mask: &FlowMask,
    actions: &[DpAction],
    ports: &dyn PortSlots,
) -> Result<EncodedFlow, NotOffloadable> {
    let from_tunnel = ports.tunnel(key.in_port).is_some();
    let mut refused = None;
    crate::datapath::action::walk(actions, &mut |a| match a {
        DpAction::SetArpSpa(_)
        | DpAction::SetArpTpa(_)
        | DpAction::SetArpSha(_)
        | DpAction::SetArpTha(_) => {
            refused.get_or_insert("tc:arp-rewrite");
        }
        DpAction::Output(p) if from_tunnel && ports.tunnel(*p).is_some() => {
            refused.get_or_insert("tc:tunnel-to-tunnel");
        }
        _ => {}
    });
    if let Some(r) = refused {
        return Err(no(r));
    }
    let (k, m) = (key, &mask.0);
    if k.vlan_tci & m.vlan_tci != 0 {
        // Tagged frames out of a tunnel (skb->protocol stays the outer
        // one after the decap) or into one (the helper encapsulates only
        // IPv4/IPv6) go through userspace.
        if from_tunnel {
            return Err(no("tc:tunnel-inner-vlan"));
        }
        if actions
            .iter()
            .any(|a| matches!(a, DpAction::Output(p) if ports.tunnel(*p).is_some()))
        {
            return Err(no("tc:tagged-into-tunnel"));
        }
    }
    if !from_tunnel
        && (k.tun_id & m.tun_id != 0
            || k.tun_src & m.tun_src != 0
            || k.tun_dst & m.tun_dst != 0
            || k.tun_flags & m.tun_flags != 0
            || k.tun_metadata[0] & m.tun_metadata[0] != 0)
    {
        return Err(no("tc:tunnel"));
    }
    encode_engine(key, mask, actions, ports, true)
}

/// Decode a value's action list (for dumps and tests).
pub fn actions_of(v: &FlowValue) -> Vec<XdpAction> {
    let n = usize::from(v.n_actions).min(MAX_ACTIONS);
    v.actions[..n]
        .iter()
        .filter_map(XdpAction::from_raw)
        .collect()
}

#[cfg(test)]
#[allow(clippy::field_reassign_with_default)]
mod tests {
    use super::*;

    fn ports() -> HashMap<u32, u32> {
        HashMap::from([(1, 0), (2, 1), (3, 2)])
    }

    fn tcp_flow() -> (FlowKey, FlowMask) {
        let mut k = FlowKey::default();
        k.in_port = 1;
        k.dl_type = 0x0800;
        k.nw_proto = 6;
        k.nw_src = 0xc612_0001;
        k.nw_dst = 0xc612_0102;
        k.tp_dst = 80;
        k.nw_ttl = 64;
        let mut m = FlowMask::catchall();
        m.0.in_port = u32::MAX;
        m.0.dl_type = 0xffff;
        m.0.nw_proto = 0xff;
        m.0.nw_dst = 0xffff_ff00;
        m.0.tp_dst = 0xffff;
        (k, m)
    }

    #[test]
    fn supported_flow_encodes_every_action() {
        let (k, m) = tcp_flow();
        let acts = vec![
            DpAction::SetEthSrc([2, 0, 0, 0, 0, 9]),
            DpAction::SetEthDst([2, 0, 0, 0, 0, 8]),
            DpAction::SetIpv4Src(0xc612_0063),
            DpAction::SetIpv4Dst(0xc612_0164),
            DpAction::SetTos(0x20),
            DpAction::SetTtl(63),
            DpAction::SetTpSrc(1000),
            DpAction::SetTpDst(8080),
            DpAction::PushVlan {
                tpid: 0x8100,
                tci: 0x2064,
            },
            DpAction::SetVlanTci(0x0065),
            DpAction::PopVlan,
            DpAction::Output(3),
        ];
        let e = encode(&k, &m, &acts, &ports()).unwrap();
        assert_eq!(e.value.n_actions, 12);
        assert_eq!(e.value.flags, flag::OUTPUT | flag::SET_TP);
        assert_eq!(e.value.out_slot, 2);
        assert_eq!(e.mask.nw_dst, 0xffff_ff00);
        // The key is stored masked: nw_src and ttl are wildcarded.
        assert_eq!((e.key.nw_src, e.key.nw_ttl), (0, 0));
        assert_eq!(e.key.nw_dst, 0xc612_0100);
        assert_eq!((e.key.in_port, e.key.tp_dst, e.key.nw_proto), (1, 80, 6));
        let back = actions_of(&e.value);
        assert_eq!(
            back,
            vec![
                XdpAction::SetEthSrc([2, 0, 0, 0, 0, 9]),
                XdpAction::SetEthDst([2, 0, 0, 0, 0, 8]),
                XdpAction::SetIpv4Src(0xc612_0063),
                XdpAction::SetIpv4Dst(0xc612_0164),
                XdpAction::SetTos(0x20),
                XdpAction::SetTtl(63),
                XdpAction::SetTpSrc(1000),
                XdpAction::SetTpDst(8080),
                XdpAction::PushVlan {
                    tpid: 0x8100,
                    tci: 0x2064
                },
                XdpAction::SetVlanTci(0x0065),
                XdpAction::PopVlan,
                XdpAction::Output { slot: 2 },
            ]
        );
        // Raw encoding details the C side reads.
        assert_eq!(e.value.actions[2].op, op::SET_IPV4_SRC);
        assert_eq!(e.value.actions[2].arg32, 0xc612_0063);
        assert_eq!(e.value.actions[8].arg32, 0x8100);
        assert_eq!(e.value.actions[8].arg16, 0x2064);
        assert_eq!(&e.value.actions[0].data[..6], &[2, 0, 0, 0, 0, 9]);
    }

    #[test]
    fn ipv6_arp_and_drop_encode() {
        let (k, m) = tcp_flow();
        let a6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
        let e = encode(
            &k,
            &m,
            &[
                DpAction::SetIpv6Src(a6),
                DpAction::SetIpv6Dst(a6),
                DpAction::Output(1),
            ],
            &ports(),
        )
        .unwrap();
        assert_eq!(e.value.actions[0].data, a6);
        let e = encode(
            &k,
            &m,
            &[
                DpAction::SetArpSpa(1),
                DpAction::SetArpTpa(2),
                DpAction::SetArpSha([1; 6]),
                DpAction::SetArpTha([2; 6]),
                DpAction::Output(2),
            ],
            &ports(),
        )
        .unwrap();
        assert_eq!(e.value.n_actions, 5);
        // Policy drop (empty list) and explicit drops.
        let e = encode(&k, &m, &[], &ports()).unwrap();
        assert_eq!((e.value.n_actions, e.value.flags), (0, 0));
        let e = encode(
            &k,
            &m,
            &[
                DpAction::SetTtl(1),
                DpAction::Drop(DropReason::TtlExceeded),
                DpAction::Output(2),
            ],
            &ports(),
        )
        .unwrap();
        assert_eq!(
            actions_of(&e.value),
            vec![XdpAction::SetTtl(1), XdpAction::Drop { reason: 0 }]
        );
    }

    #[test]
    fn tc_refuses_what_its_program_leaves_out() {
        let (k, m) = tcp_flow();
        for (a, reason) in [
            (DpAction::SetArpSpa(1), "tc:arp-rewrite"),
            (DpAction::SetArpTha([2, 0, 0, 0, 0, 1]), "tc:arp-rewrite"),
        ] {
            let e = encode_tc(&k, &m, &[a, DpAction::Output(2)], &ports()).unwrap_err();
            assert_eq!(e.reason, reason);
        }
        let mut mt = m;
        mt.0.tun_id = u64::MAX;
        let mut kt = k;
        kt.tun_id = 5;
        assert_eq!(
            encode_tc(&kt, &mt, &[DpAction::Output(2)], &ports())
                .unwrap_err()
                .reason,
            "tc:tunnel"
        );
        // Matching "no tunnel" (tun_id=0 exactly) is what TC frames are.
        assert!(encode_tc(&k, &mt, &[DpAction::Output(2)], &ports()).is_ok());
        let acts = [DpAction::SetIpv4Dst(0xc612_0009), DpAction::Output(2)];
        assert_eq!(
            encode_tc(&k, &m, &acts, &ports()).unwrap(),
            encode(&k, &m, &acts, &ports()).unwrap()
        );
    }

    #[test]
    fn unsupported_fields_have_stable_reasons() {
        let (k, m0) = tcp_flow();
        type Case = (fn(&mut FlowKey), &'static str);
        let cases: Vec<Case> = vec![
            (|m| m.ct_state = 0xff, "field:ct_state"),
            (|m| m.ct_zone = 1, "field:ct_zone"),
            (|m| m.ct_mark = 1, "field:ct_mark"),
            (|m| m.metadata = 1, "field:metadata"),
            (|m| m.tun_metadata[3] = 1, "field:tun_metadata3"),
            (|m| m.regs[0] = 1, "field:reg0"),
            (|m| m.regs[5] = 1, "field:reg5"),
            (|m| m.regs_hi[7] = 1, "field:reg8-15"),
            (|m| m.ct_label[15] = 1, "field:ct_label"),
            (|m| m.ct_tp_dst = 0xffff, "field:ct_tuple"),
            (|m| m.ct_ipv6_dst[0] = 0xff, "field:ct_tuple"),
            (|m| m.pkt_mark = 1, "field:pkt_mark"),
        ];
        for (set, reason) in cases {
            let mut m = m0;
            set(&mut m.0);
            // Needing them zero is what every kernel packet satisfies: the
            // bits leave the kernel match (not so Geneve options, which
            // come from packets).
            if !reason.starts_with("field:tun_metadata") {
                let e = encode(&k, &m, &[DpAction::Output(2)], &ports()).unwrap();
                assert_eq!(e.mask.to_flow_key(), m0.0, "{reason}");
            }
            // Needing them non-zero cannot be met in the kernel.
            let mut nk = k;
            set(&mut nk);
            let e = encode(&nk, &m, &[DpAction::Output(2)], &ports()).unwrap_err();
            assert_eq!(e.reason, reason);
        }
        // The ND fields are never taken: not even at zero (an ND frame
        // has them, and the program would not see its values), nor the
        // ARP hardware addresses of a flow that is not ARP (they hold the
        // ND options there).
        type NdCase = (fn(&mut FlowKey), &'static str);
        let nd: [NdCase; 3] = [
            (|m| m.nd_target[15] = 1, "field:nd_target"),
            (|m| m.arp_sha = [0xff; 6], "field:nd_sll"),
            (|m| m.arp_tha = [0xff; 6], "field:nd_tll"),
        ];
        // An ICMPv6 flow whose type is open could be ND: refused.
        let mut k6 = k;
        k6.dl_type = 0x86dd;
        k6.nw_proto = nicflow_packet::IPPROTO_ICMPV6;
        k6.nw_dst = 0;
        let mut m6 = m0;
        m6.0.nw_dst = 0;
        for (set, reason) in nd {
            let mut m = m6;
            set(&mut m.0);
            let e = encode(&k6, &m, &[DpAction::Output(2)], &ports()).unwrap_err();
            assert_eq!(e.reason, reason);
            // A TCP flow cannot be ND: needing the ND fields zero holds
            // for every kernel packet, and the bits leave its kernel match
            // (megaflows of tables with ND rules look at them).
            let mut m = m0;
            set(&mut m.0);
            let e = encode(&k, &m, &[DpAction::Output(2)], &ports()).unwrap();
            assert_eq!(e.mask.to_flow_key(), m0.0, "{reason}");
            // Needing them non-zero in a TCP flow cannot be met.
            let mut nk = k;
            set(&mut nk);
            assert!(encode(&nk, &m, &[DpAction::Output(2)], &ports()).is_err());
        }
        let mut arp_k = FlowKey {
            dl_type: 0x0806,
            ..FlowKey::default()
        };
        arp_k.arp_sha = [2; 6];
        let mut arp_m = FlowMask::catchall();
        arp_m.0.dl_type = 0xffff;
        arp_m.0.arp_sha = [0xff; 6];
        arp_m.0.arp_tha = [0xff; 6];
        assert!(encode(&arp_k, &arp_m, &[DpAction::Output(2)], &ports()).is_ok());
        // Every field the program extracts is accepted under a full mask.
        let mut full = FlowMask::exact();
        full.0.clear_userspace_only();
        full.0.tun_metadata = [0; 8];
        full.0.nd_target = [0; 16];
        full.0.arp_sha = [0; 6];
        full.0.arp_tha = [0; 6];
        let e = encode(&k, &full, &[DpAction::Output(2)], &ports()).unwrap();
        assert_eq!(e.key, DpKey::from_flow_key(&k));
        // Every flow the engines see is a first pass: recirc_id is 0 in the
        // key and needs no kernel field.
        full.0.recirc_id = 0;
        assert_eq!(e.mask.to_flow_key(), full.0);
        // Recirculated passes and ct actions stay in userspace.
        let mut rk = k;
        rk.recirc_id = 1;
        let e = encode(&rk, &full, &[DpAction::Output(2)], &ports()).unwrap_err();
        assert_eq!(e.reason, "ct:recirculated");
        let e = encode(&k, &m0, &[DpAction::Recirc(1)], &ports()).unwrap_err();
        assert_eq!(e.reason, "ct:userspace");
    }

    /// ovn-controller's option: {class=0x0102,type=0x80,len=4} ->
    /// tun_metadata0, plus one more on slot 2.
    const OVN_TLV: [TlvMapping; 2] = [
        TlvMapping {
            class: 0x0102,
            typ: 0x80,
            slot: 0,
        },
        TlvMapping {
            class: 0xffff,
            typ: 0x01,
            slot: 2,
        },
    ];

    /// Port 5 is a fixed-key tunnel (slot 3), port 6 a `key=flow` Geneve
    /// one with [`OVN_TLV`] (slot 4); 1-3 plain ports.
    struct WithTunnels(HashMap<u32, u32>);

    impl PortSlots for WithTunnels {
        fn slot(&self, port: u32) -> Option<u32> {
            self.0.slot(port)
        }

        fn tunnel(&self, port: u32) -> Option<TunnelSlot> {
            match port {
                5 => Some(TunnelSlot {
                    slot: 3,
                    flow_key: false,
                    tlv: TunnelTlv::default(),
                }),
                6 => Some(TunnelSlot {
                    slot: 4,
                    flow_key: true,
                    tlv: TunnelTlv::new(&OVN_TLV),
                }),
                _ => None,
            }
        }
    }

    #[test]
    fn tc_tunnels_carry_metadata_from_tunnel_ports_only() {
        let (k, m) = tcp_flow();
        let p = WithTunnels(ports());
        // Into a TC tunnel: the same encoding as XDP's.
        assert_eq!(
            encode_tc(&k, &m, &[DpAction::Output(5)], &p).unwrap(),
            encode(&k, &m, &[DpAction::Output(5)], &p).unwrap()
        );
        // From a tunnel port, tun_* may be matched; into another tunnel not.
        let (mut kt, mut mt) = (k, m);
        kt.in_port = 5;
        kt.tun_id = 4242;
        mt.0.tun_id = u64::MAX;
        assert!(encode_tc(&kt, &mt, &[DpAction::Output(2)], &p).is_ok());
        assert_eq!(
            encode_tc(&kt, &mt, &[DpAction::Output(6)], &p)
                .unwrap_err()
                .reason,
            "tc:tunnel-to-tunnel"
        );
        // The same match from a plain port needs metadata it never has.
        kt.in_port = 1;
        assert_eq!(
            encode_tc(&kt, &mt, &[DpAction::Output(2)], &p)
                .unwrap_err()
                .reason,
            "tc:tunnel"
        );
    }

    #[test]
    fn tc_pushes_geneve_options_and_matches_tun_metadata0() {
        let (k, m) = tcp_flow();
        let p = WithTunnels(ports());
        // OVN's egress: VNI, logical ports in tun_metadata0, output.
        let acts = [
            DpAction::SetTunnelId(5),
            DpAction::SetTunnelMetadata {
                slot: 0,
                value: 0x0001_0002,
            },
            DpAction::Output(6),
        ];
        // XDP pushes no options.
        assert_eq!(
            encode(&k, &m, &acts, &p).unwrap_err().reason,
            "action:set-tun-metadata"
        );
        let e = encode_tc(&k, &m, &acts, &p).unwrap();
        let mut opt0 = [0u8; 16];
        opt0[..8].copy_from_slice(&[0x01, 0x02, 0x80, 0x01, 0x00, 0x01, 0x00, 0x02]);
        assert_eq!(
            actions_of(&e.value),
            vec![
                XdpAction::TunOpts {
                    chunk: 0,
                    data: opt0
                },
                XdpAction::TunnelOutput {
                    slot: 4,
                    vni: TunnelVni::Set(5),
                    opts: 8,
                    critical: true,
                }
            ]
        );
        assert_eq!(e.value.flags & flag::TUNNEL, flag::TUNNEL);
        // Slots in the map's order, a slot the map does not name left out,
        // the last value of a slot wins; a non-critical option alone: no C.
        let acts = [
            DpAction::SetTunnelMetadata { slot: 2, value: 7 },
            DpAction::SetTunnelMetadata { slot: 1, value: 9 },
            DpAction::SetTunnelMetadata { slot: 0, value: 1 },
            DpAction::SetTunnelMetadata { slot: 0, value: 3 },
            DpAction::Output(6),
        ];
        let v = encode_tc(&k, &m, &acts, &p).unwrap().value;
        let mut want = [0u8; 16];
        want.copy_from_slice(&[
            0x01, 0x02, 0x80, 0x01, 0, 0, 0, 3, 0xff, 0xff, 0x01, 0x01, 0, 0, 0, 7,
        ]);
        assert_eq!(
            actions_of(&v)[0],
            XdpAction::TunOpts {
                chunk: 0,
                data: want
            }
        );
        let acts = [
            DpAction::SetTunnelMetadata { slot: 2, value: 7 },
            DpAction::Output(6),
        ];
        let v = encode_tc(&k, &m, &acts, &p).unwrap().value;
        assert!(matches!(
            actions_of(&v)[1],
            XdpAction::TunnelOutput {
                opts: 8,
                critical: false,
                ..
            }
        ));
        // Metadata into a port without options (VXLAN), or a plain port:
        // nothing on the wire.
        for out in [5, 2] {
            let acts = [
                DpAction::SetTunnelMetadata { slot: 0, value: 1 },
                DpAction::Output(out),
            ];
            assert_eq!(
                actions_of(&encode_tc(&k, &m, &acts, &p).unwrap().value).len(),
                1
            );
        }
        // The packed form round-trips.
        for a in actions_of(&encode_tc(&k, &m, &acts_ovn(), &p).unwrap().value) {
            assert_eq!(XdpAction::from_raw(&a.raw()), Some(a));
        }
        // A chunk missing before the output is refused by pack.
        assert_eq!(
            pack(&[XdpAction::TunnelOutput {
                slot: 1,
                vni: TunnelVni::Template,
                opts: 8,
                critical: false
            }])
            .unwrap_err()
            .reason,
            "action:tun-opts"
        );

        // Matching: tun_metadata0 from the Geneve port is in the key.
        let (mut kt, mut mt) = (k, m);
        kt.in_port = 6;
        kt.tun_metadata[0] = 0x0001_0002;
        mt.0.tun_metadata[0] = 0x7fff_ffff;
        assert_eq!(
            encode(&kt, &mt, &[DpAction::Output(2)], &p)
                .unwrap_err()
                .reason,
            "field:tun_metadata0"
        );
        let e = encode_tc(&kt, &mt, &[DpAction::Output(2)], &p).unwrap();
        assert_eq!((e.key.tun_md0, e.mask.tun_md0), (0x0001_0002, 0x7fff_ffff));
        // A slot no option fills and whose value is 0 leaves the match; one
        // the map fills, or a non-zero one, stays in userspace.
        let mut m3 = mt;
        m3.0.tun_metadata[3] = u32::MAX;
        let e = encode_tc(&kt, &m3, &[DpAction::Output(2)], &p).unwrap();
        assert_eq!(e.mask, DpKey::from_flow_key(&mt.0));
        let mut k3 = kt;
        k3.tun_metadata[3] = 1;
        assert_eq!(
            encode_tc(&k3, &m3, &[DpAction::Output(2)], &p)
                .unwrap_err()
                .reason,
            "field:tun_metadata3"
        );
        let mut m2 = mt;
        m2.0.tun_metadata[2] = u32::MAX;
        assert_eq!(
            encode_tc(&kt, &m2, &[DpAction::Output(2)], &p)
                .unwrap_err()
                .reason,
            "field:tun_metadata2"
        );
        // From a plain port: tun_metadata0 is 0 in every kernel frame.
        kt.in_port = 1;
        assert_eq!(
            encode_tc(&kt, &mt, &[DpAction::Output(2)], &p)
                .unwrap_err()
                .reason,
            "tc:tunnel"
        );
        kt.tun_metadata[0] = 0;
        m2.0.tun_metadata[0] = 0;
        assert!(encode_tc(&kt, &m2, &[DpAction::Output(2)], &p).is_ok());
    }

    fn acts_ovn() -> Vec<DpAction> {
        vec![
            DpAction::SetTunnelId(5),
            DpAction::SetTunnelMetadata {
                slot: 0,
                value: 0x0001_0002,
            },
            DpAction::Output(6),
        ]
    }

    #[test]
    fn tunnel_outputs_take_the_vni_from_where_userspace_would() {
        let (mut k, mut m) = tcp_flow();
        let p = WithTunnels(ports());
        let acts = |a: &[DpAction]| actions_of(&encode(&k, &m, a, &p).unwrap().value);
        let out = |slot, vni| XdpAction::TunnelOutput {
            slot,
            vni,
            opts: 0,
            critical: false,
        };
        assert_eq!(
            acts(&[DpAction::Output(5)]),
            vec![out(3, TunnelVni::Template)]
        );
        // set_tunnel is metadata: it shows only in a key=flow port's VNI,
        // the last one wins, 24 bits.
        assert_eq!(
            acts(&[DpAction::SetTunnelId(0x1_0000_0007), DpAction::Output(6)]),
            vec![out(4, TunnelVni::Set(7))]
        );
        assert_eq!(
            acts(&[DpAction::SetTunnelId(1), DpAction::Output(5)]),
            vec![out(3, TunnelVni::Template)]
        );
        assert_eq!(
            acts(&[DpAction::SetTunnelId(9), DpAction::Output(2)]),
            vec![XdpAction::Output { slot: 1 }]
        );
        assert_eq!(
            acts(&[DpAction::Output(6)]),
            vec![out(4, TunnelVni::FromKey)]
        );
        let v = encode(&k, &m, &[DpAction::PopVlan, DpAction::Output(5)], &p)
            .unwrap()
            .value;
        assert_eq!((v.flags & flag::TUNNEL, v.out_slot), (flag::TUNNEL, 3));
        let push = [
            DpAction::PushVlan {
                tpid: 0x8100,
                tci: 5,
            },
            DpAction::Output(5),
        ];
        assert_eq!(
            encode(&k, &m, &push, &p).unwrap_err().reason,
            "action:push-vlan-before-tunnel"
        );
        // Tunnel metadata is matched like any other field.
        k.tun_id = 4242;
        m.0.tun_id = u64::MAX;
        let e = encode(&k, &m, &[DpAction::Output(1)], &p).unwrap();
        assert_eq!((e.key.tun_id, e.mask.tun_id), (4242, u64::MAX));
        // Round trip through the packed form.
        for a in [
            out(4, TunnelVni::Set(0xabcdef)),
            out(1, TunnelVni::FromKey),
            out(0, TunnelVni::Template),
        ] {
            assert_eq!(XdpAction::from_raw(&a.raw()), Some(a));
        }
    }

    #[test]
    fn unsupported_actions_have_stable_reasons() {
        let (k, m) = tcp_flow();
        let p = ports();
        let reason = |acts: &[DpAction]| encode(&k, &m, acts, &p).unwrap_err().reason;
        assert_eq!(
            reason(&[DpAction::Controller {
                max_len: 128,
                reason: 1,
                table_id: 0,
                cookie: 0,
                extra: None,
            }]),
            "action:controller"
        );
        assert_eq!(
            reason(&[DpAction::Output(1), DpAction::Output(2)]),
            "multiple-outputs"
        );
        assert_eq!(
            reason(&[DpAction::Output(1), DpAction::SetTtl(3)]),
            "action-after-output"
        );
        assert_eq!(reason(&[DpAction::Output(9)]), "action:output-unmapped");
        assert_eq!(
            reason(&[
                DpAction::PushVlan {
                    tpid: 0x9100,
                    tci: 1
                },
                DpAction::Output(1)
            ]),
            "action:push-vlan-tpid"
        );
        let many = vec![DpAction::SetTtl(3); MAX_ACTIONS + 1];
        assert_eq!(reason(&many), "too-many-actions");
        for nd in [
            DpAction::SetNdTarget([1; 16]),
            DpAction::SetNdSll([2; 6]),
            DpAction::SetNdTll([3; 6]),
        ] {
            assert_eq!(reason(&[nd, DpAction::Output(1)]), "action:set-nd");
        }
        // SCTP port rewrite when the mask pins SCTP.
        let mut ks = k;
        ks.nw_proto = nicflow_packet::IPPROTO_SCTP;
        let e = encode(&ks, &m, &[DpAction::SetTpDst(1), DpAction::Output(1)], &p);
        assert_eq!(e.unwrap_err().reason, "action:set-sctp-port");
        // ICMP type/code rewrites (tp fields) when the mask pins ICMP.
        for proto in [1, 58] {
            let mut ki = k;
            ki.nw_proto = proto;
            let e = encode(&ki, &m, &[DpAction::SetTpSrc(0), DpAction::Output(1)], &p);
            assert_eq!(e.unwrap_err().reason, "action:set-icmp");
        }
        // With nw_proto wildcarded it is accepted with the runtime check.
        let mut mw = m;
        mw.0.nw_proto = 0;
        let e = encode(&ks, &mw, &[DpAction::SetTpDst(1), DpAction::Output(1)], &p).unwrap();
        assert_ne!(e.value.flags & flag::SET_TP, 0);
        // A closure works as the port map.
        let f = |port: u32| (port == 5).then_some(4);
        let e = encode(&k, &m, &[DpAction::Output(5)], &f).unwrap();
        assert_eq!(e.value.out_slot, 4);
    }

    #[test]
    fn pack_rules() {
        assert_eq!(
            pack(&[XdpAction::SetTtl(5), XdpAction::DecTtl])
                .unwrap_err()
                .reason,
            "action:dec-ttl-after-set-ttl"
        );
        let v = pack(&[XdpAction::DecTtl, XdpAction::Output { slot: 3 }]).unwrap();
        assert_eq!(v.flags, flag::DEC_TTL | flag::OUTPUT);
        assert_eq!(
            pack(&[XdpAction::Output { slot: 3 }, XdpAction::PopVlan])
                .unwrap_err()
                .reason,
            "action-after-output"
        );
        let all = [
            XdpAction::Drop { reason: 1 },
            XdpAction::SetEthSrc([1; 6]),
            XdpAction::SetEthDst([2; 6]),
            XdpAction::SetIpv4Src(1),
            XdpAction::SetIpv4Dst(2),
            XdpAction::SetIpv6Src([3; 16]),
            XdpAction::SetIpv6Dst([4; 16]),
            XdpAction::SetTos(5),
            XdpAction::DecTtl,
            XdpAction::SetTpSrc(6),
            XdpAction::SetTpDst(7),
            XdpAction::PushVlan {
                tpid: 0x88a8,
                tci: 8,
            },
            XdpAction::PopVlan,
            XdpAction::SetVlanTci(9),
            XdpAction::SetArpSpa(10),
            XdpAction::SetArpTpa(11),
        ];
        let v = pack(&all).unwrap();
        assert_eq!(actions_of(&v), all.to_vec());
        let v = pack(&[
            XdpAction::SetArpSha([1; 6]),
            XdpAction::SetArpTha([2; 6]),
            XdpAction::SetTtl(9),
        ])
        .unwrap();
        assert_eq!(actions_of(&v).len(), 3);
    }

    /// Ports 2 and 3, select group g in slot g + 10.
    struct SelSlots;
    impl PortSlots for SelSlots {
        fn slot(&self, port: u32) -> Option<u32> {
            ports().get(&port).copied()
        }
        fn select_slot(&self, group: u32) -> Option<u32> {
            Some(group + 10)
        }
    }

    #[test]
    fn per_packet_select_is_one_action_and_a_flow_per_bucket() {
        use crate::datapath::action::{SelectBucket, SelectMethod};
        let (k, m) = tcp_flow();
        let acts = vec![
            DpAction::SetTtl(9),
            DpAction::Select {
                group: 4,
                method: SelectMethod::Weighted,
                buckets: vec![
                    SelectBucket {
                        index: 0,
                        weight: 3,
                        actions: vec![DpAction::SetTpSrc(1001), DpAction::Output(2)],
                    },
                    SelectBucket {
                        index: 2,
                        weight: 1,
                        actions: vec![DpAction::Output(3)],
                    },
                ],
            },
        ];
        let e = encode(&k, &m, &acts, &SelSlots).unwrap();
        assert_eq!(
            actions_of(&e.value),
            vec![XdpAction::Select {
                slot: 14,
                method: sel::WRR,
                n: 2
            }]
        );
        // The select flow pre-checks for its buckets (SET_TP from bucket 0).
        assert_eq!(e.value.flags, flag::SELECT | flag::SET_TP);
        assert_eq!(e.buckets.len(), 2);
        assert_eq!(
            actions_of(&e.buckets[0]),
            vec![
                XdpAction::SetTtl(9),
                XdpAction::SetTpSrc(1001),
                XdpAction::Output { slot: 1 }
            ]
        );
        assert_eq!(
            actions_of(&e.buckets[1]),
            vec![XdpAction::SetTtl(9), XdpAction::Output { slot: 2 }]
        );
        assert_eq!(e.buckets[1].flags, flag::OUTPUT);
        assert_eq!(e.buckets[1].out_slot, 2);
        // Without a slot from the engine: userspace.
        assert_eq!(
            encode(&k, &m, &acts, &ports()).unwrap_err().reason,
            "select:no-slot"
        );
        // A select inside a bucket.
        let nested = vec![DpAction::Select {
            group: 1,
            method: SelectMethod::RoundRobin,
            buckets: vec![SelectBucket {
                index: 0,
                weight: 1,
                actions: vec![acts[1].clone()],
            }],
        }];
        assert_eq!(
            encode(&k, &m, &nested, &SelSlots).unwrap_err().reason,
            "select:nested"
        );
    }
}
