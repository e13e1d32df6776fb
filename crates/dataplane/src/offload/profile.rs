//! nicflow's datapath flows in Open vSwitch's form, for the hardware
//! profiles (`nicflow_hwprofile`): what OVS 3.1 would have handed to TC
//! for the same rules and packets.
//!
//! Place in a frame's path: beside the offload manager. `offload-plan`
//! converts every flow of a bridge; under `offload=profile:NAME` the
//! manager converts each flow before its kernel install and installs it
//! only if the modelled NIC would hold it ([`Emulation`]).
//!
//! Where nicflow's datapath flow differs from OVS's, the conversion writes
//! OVS's form and says what it changed ([`Converted::notes`]):
//!
//! * registers and `metadata` never reach an OVS datapath flow (after a
//!   recirculation they live in the frozen state its `recirc_id` names):
//!   dropped from the match;
//! * a flow received on a tunnel port matches the outer addresses, the VNI,
//!   TOS, the flags and the UDP destination port exactly, as OVS's
//!   `tnl_wc_init()` (`ofproto/tunnel.c`) unwildcards them;
//! * rewrites of one header between two outputs are one `set` action, as
//!   OVS's `commit_odp_actions()` writes them; a VLAN rewrite is
//!   `pop_vlan,push_vlan` (OVS's `commit_vlan_action()` for the kernel
//!   datapath);
//! * an output to a tunnel port is `set(tunnel(...)),output`, the outer
//!   header from the port's options and the flow's `set_tunnel`/Geneve
//!   options.

use crate::datapath::DpAction;
use nicflow_flow::Match;
use nicflow_hwprofile::model::{
    self as hw, CtAction, DpFlow, DpMatch, GeneveOpt, Masked, PortKind, SetHeader, TunnelMatch,
    TunnelSet, TunnelType, VlanMatch,
};
use nicflow_packet::buf::{TUN_F_CSUM, TUN_F_DONT_FRAGMENT, TUN_F_KEY, TUN_F_OAM};
use nicflow_packet::tunnel::TunnelKind;
use nicflow_port::hook::OffloadHook;
use nicflow_port::tunnel::{TunnelConfig, TunnelKey};
use std::collections::BTreeMap;

/// A bridge port as the profiles see it, with a tunnel's options.
#[derive(Clone, Debug)]
pub struct ModelPort {
    pub port: hw::Port,
    pub tunnel: Option<TunnelConfig>,
}

/// What port `no` (`name`, attached through `hook`) is on the modelled
/// NIC: a TC or AF_XDP port is a VF representor of the eSwitch (a plain
/// host behind a veth stands for a VF's host), a tunnel port OVS's tunnel
/// vport, an internal/TAP port OVS's internal port, the rest a foreign
/// netdev.
pub fn model_port(no: u32, name: &str, hook: &OffloadHook) -> ModelPort {
    let (kind, tunnel) = match hook {
        OffloadHook::AfXdp(_) | OffloadHook::Tc(_) => (PortKind::Representor, None),
        OffloadHook::Tunnel(t) => (
            PortKind::Tunnel {
                tunnel: match t.cfg.kind {
                    TunnelKind::Vxlan => TunnelType::Vxlan,
                    TunnelKind::Geneve => TunnelType::Geneve,
                },
                dst_port: t.cfg.dst_port,
            },
            Some(t.cfg.clone()),
        ),
        // OVS's internal port is type "internal" only (`is_internal_port`);
        // a TAP is a foreign netdev to the NIC.
        OffloadHook::Userspace { kind } => match *kind {
            "internal" => (PortKind::Internal, None),
            other => (
                PortKind::Other {
                    what: format!("{other} port"),
                },
                None,
            ),
        },
    };
    ModelPort {
        port: hw::Port {
            no,
            name: name.to_string(),
            kind,
        },
        tunnel,
    }
}

/// A converted flow.
#[derive(Clone, Debug)]
pub struct Converted {
    pub flow: DpFlow,
    /// Where nicflow's flow differs from OVS's (see the module docs).
    pub notes: Vec<&'static str>,
}

/// OVS's `FLOW_TNL_F_*` (lib/packets.h) from nicflow's `TUN_F_*`.
fn ovs_tnl_flags(f: u16) -> u16 {
    let mut o = 0;
    if f & TUN_F_DONT_FRAGMENT != 0 {
        o |= 1;
    }
    if f & TUN_F_CSUM != 0 {
        o |= 2;
    }
    if f & TUN_F_KEY != 0 {
        o |= 4;
    }
    if f & TUN_F_OAM != 0 {
        o |= 8;
    }
    o
}

fn m<T: Copy>(value: T, mask: T) -> Masked<T> {
    Masked { value, mask }
}

fn u128_of(a: [u8; 16]) -> u128 {
    u128::from_be_bytes(a)
}

/// The meters whose first band drops (OVS turns only those into TC police
/// actions), from the bridge's meters.
pub fn drop_meters<'a>(
    meters: impl IntoIterator<Item = &'a nicflow_ofctl::meter::MeterSpec>,
) -> std::collections::BTreeSet<u32> {
    meters
        .into_iter()
        .filter(|m| {
            m.bands
                .first()
                .is_some_and(|b| b.kind == nicflow_ofctl::meter::BandType::Drop)
        })
        .map(|m| m.meter_id)
        .collect()
}

/// Convert one datapath flow; `ports` are the bridge's, by number,
/// `drop_meters` as [`drop_meters`] gives them. `values` is a key of a
/// packet the flow covers: its fields outside `mask` are the values OVS's
/// flow key would carry (OVS always matches the EtherType and, for IP, the
/// fragment bits — `xlate_wc_init()` — and reads the IP protocol of the
/// packet when it rewrites a header); a masked key serves where the mask
/// already holds those bits (the emulation's `refine_mask` adds them).
pub fn convert(
    values: &nicflow_flow::FlowKey,
    mask: &nicflow_flow::FlowMask,
    actions: &[DpAction],
    ports: &BTreeMap<u32, ModelPort>,
    drop_meters: &std::collections::BTreeSet<u32>,
) -> Converted {
    let mask = &odp_mask(values, mask);
    let masked = values.masked(mask);
    let k = &masked;
    let mk = &mask.0;
    let is_ip = matches!(values.dl_type, 0x0800 | 0x86dd);
    let mut notes = Vec::new();
    if mk.regs.iter().chain(mk.regs_hi.iter()).any(|r| *r != 0) || mk.metadata != 0 {
        notes.push(
            "registers/metadata matched by nicflow's flow are not in OVS's datapath flow \
             (OVS keeps them in the recirculation's frozen state): dropped",
        );
    }
    if mk.dl_type != 0xffff {
        notes.push(
            "nicflow's flow covers every EtherType; OVS's datapath flows match it \
             (xlate_wc_init), one per EtherType: judged for the EtherType of the packet \
             that made it",
        );
    }
    let mut dm = DpMatch {
        recirc_id: k.recirc_id,
        in_port: k.in_port,
        pkt_mark: m(k.pkt_mark, mk.pkt_mark),
        ct_state: m(k.ct_state, mk.ct_state),
        ct_zone: m(k.ct_zone, mk.ct_zone),
        ct_mark: m(k.ct_mark, mk.ct_mark),
        ct_label: m(u128_of(k.ct_label), u128_of(mk.ct_label)),
        ct_tuple_matched: mk.ct_nw_src != 0
            || mk.ct_nw_dst != 0
            || mk.ct_tp_src != 0
            || mk.ct_tp_dst != 0
            || mk.ct_nw_proto != 0
            || mk.ct_ipv6_src != [0; 16]
            || mk.ct_ipv6_dst != [0; 16],
        eth_src: m(k.dl_src, mk.dl_src),
        eth_dst: m(k.dl_dst, mk.dl_dst),
        // xlate_wc_init(): the EtherType always, the fragment bits for IP.
        eth_type: Masked::exact(values.dl_type),
        ipv4_src: m(k.nw_src, mk.nw_src),
        ipv4_dst: m(k.nw_dst, mk.nw_dst),
        ipv6_src: m(u128_of(k.ipv6_src), u128_of(mk.ipv6_src)),
        ipv6_dst: m(u128_of(k.ipv6_dst), u128_of(mk.ipv6_dst)),
        ipv6_label: m(k.ipv6_label, mk.ipv6_label),
        // The packet's protocol even where the mask leaves it out: OVS's
        // TC translation reads it (csum_update_flag) and forces its mask.
        nw_proto: m(values.nw_proto, mk.nw_proto),
        nw_tos: m(k.nw_tos, mk.nw_tos),
        nw_ttl: m(k.nw_ttl, mk.nw_ttl),
        nw_frag: if is_ip {
            m(values.nw_frag & 3, mk.nw_frag | 3)
        } else {
            m(k.nw_frag, mk.nw_frag)
        },
        tp_src: m(k.tp_src, mk.tp_src),
        tp_dst: m(k.tp_dst, mk.tp_dst),
        tcp_flags: m(k.tcp_flags, mk.tcp_flags),
        arp_sha: m(k.arp_sha, mk.arp_sha),
        arp_tha: m(k.arp_tha, mk.arp_tha),
        nd_target: m(u128_of(k.nd_target), u128_of(mk.nd_target)),
        ..DpMatch::default()
    };
    // A tag present (CFI bit, OVS's VLAN_CFI) is a VLAN match; "no tag"
    // (the CFI bit matched as 0, as `actions=normal` leaves it) is not
    // one in OVS's datapath flow: its ODP key has no `encap(vlan)` and the
    // TC filter's protocol (the EtherType) already takes untagged frames
    // only.
    // A flow that pops or rewrites the tag matches all of it, as OVS's
    // commit_vlan_action() unwildcards the whole qtag.
    let touches_tag = actions
        .iter()
        .any(|a| matches!(a, DpAction::PopVlan | DpAction::SetVlanTci(_)));
    let tci_mask = if touches_tag { 0xffff } else { mk.vlan_tci };
    if tci_mask != 0 && values.vlan_tci & 0x1000 != 0 {
        dm.vlans.push(VlanMatch {
            tpid: 0x8100,
            tci: m(values.vlan_tci & tci_mask, tci_mask),
        });
        if mk.vlan_tci2 != 0 && k.vlan_tci2 & 0x1000 != 0 {
            dm.vlans.push(VlanMatch {
                tpid: 0x8100,
                tci: m(k.vlan_tci2, mk.vlan_tci2),
            });
        }
    }
    let in_port = ports.get(&k.in_port);
    if let Some(cfg) = in_port.and_then(|p| p.tunnel.as_ref()) {
        // tnl_wc_init(): the receiving tunnel's header exactly.
        // Where nicflow's mask left an outer field out, the key holds no
        // value for it: the port's own endpoints and VNI are the values
        // every packet of the flow carried.
        let exact_or =
            |masked: bool, v: u32, port: u32| Masked::exact(if masked { v } else { port });
        let tun_id = match (mk.tun_id == u64::MAX, cfg.key) {
            (true, _) | (false, TunnelKey::Flow) => k.tun_id,
            (false, TunnelKey::Fixed(v)) => u64::from(v),
        };
        let mut t = TunnelMatch {
            tun_id: Masked::exact(tun_id),
            ipv4_src: exact_or(mk.tun_src == u32::MAX, k.tun_src, u32::from(cfg.remote_ip)),
            ipv4_dst: exact_or(mk.tun_dst == u32::MAX, k.tun_dst, u32::from(cfg.local_ip)),
            tos: Masked::exact(cfg.tos),
            tp_dst: Masked::exact(cfg.dst_port),
            // VXLAN and Geneve always carry a key (FLOW_TNL_F_KEY).
            flags: m(
                if mk.tun_flags != 0 {
                    ovs_tnl_flags(k.tun_flags)
                } else {
                    4
                },
                1 | 2 | 4,
            ),
            ..TunnelMatch::default()
        };
        if mk.tun_src != u32::MAX || mk.tun_dst != u32::MAX || mk.tun_id != u64::MAX {
            notes.push(
                "nicflow's tunnel flow leaves outer fields wildcarded; OVS's tnl_wc_init() \
                 matches them exactly: modelled as OVS's",
            );
        }
        for map in &cfg.tlv_map {
            let slot = map.slot as usize;
            if slot < 8 && mk.tun_metadata[slot] != 0 {
                t.geneve_opts.push(GeneveOpt {
                    class: map.class,
                    typ: map.typ,
                    value: k.tun_metadata[slot].to_be_bytes().to_vec(),
                    mask: mk.tun_metadata[slot].to_be_bytes().to_vec(),
                });
            }
        }
        dm.tunnel = Some(t);
    }
    let flow = DpFlow {
        matching: dm,
        actions: convert_actions(values, actions, ports, drop_meters, &mut notes),
    };
    Converted { flow, notes }
}

/// The mask as an ODP datapath flow can carry it: only the fields of the
/// packet's own layers. nicflow's classifier unwildcards every field of
/// each subtable it probes (an IPv6 rule's addresses on an IPv4 flow);
/// OVS's `odp_flow_key_from_mask()` writes a mask attribute only for the
/// headers the key has, so those bits never reach its datapath.
fn odp_mask(
    values: &nicflow_flow::FlowKey,
    mask: &nicflow_flow::FlowMask,
) -> nicflow_flow::FlowMask {
    let mut m = *mask;
    let w = &mut m.0;
    let dl = values.dl_type;
    let (v4, v6, arp) = (dl == 0x0800, dl == 0x86dd, dl == 0x0806 || dl == 0x8035);
    let ip = v4 || v6;
    if !(v4 || arp) {
        w.nw_src = 0;
        w.nw_dst = 0;
    }
    if !v6 {
        w.ipv6_src = [0; 16];
        w.ipv6_dst = [0; 16];
        w.ipv6_label = 0;
    }
    if !(ip || arp) {
        w.nw_proto = 0;
    }
    if !ip {
        w.nw_tos = 0;
        w.nw_ttl = 0;
        w.nw_frag = 0;
    }
    // L4 exists for the first fragment of TCP, UDP, SCTP, ICMP(v6) only.
    let proto = values.nw_proto;
    let later = values.nw_frag & nicflow_flow::key::FRAG_LATER != 0;
    let l4 = ip
        && !later
        && match proto {
            6 | 17 | 132 => true,
            1 => v4,
            58 => v6,
            _ => false,
        };
    if !l4 {
        w.tp_src = 0;
        w.tp_dst = 0;
    }
    if !(l4 && proto == 6) {
        w.tcp_flags = 0;
    }
    // ND: ICMPv6 neighbor solicitation/advertisement (type in tp_src).
    let nd = l4 && v6 && proto == 58 && matches!(values.tp_src, 135 | 136) && values.tp_dst == 0;
    if !nd {
        w.nd_target = [0; 16];
    }
    if !(arp || nd) {
        w.arp_sha = [0; 6];
        w.arp_tha = [0; 6];
    }
    m
}

/// Header rewrites waiting for the next "commit" (an output, ct, recirc,
/// a VLAN change...), one `set` per header as OVS writes them.
/// Source and destination MAC rewrites.
type EthPair = (Masked<[u8; 6]>, Masked<[u8; 6]>);

#[derive(Default)]
struct Pending {
    eth: Option<EthPair>,
    ip4: Option<[Masked<u32>; 2]>,
    ip4_tos_ttl: Option<[Masked<u8>; 2]>,
    ip6: Option<[Masked<u128>; 2]>,
    l4: Option<[Masked<u16>; 2]>,
    arp: bool,
    nd: bool,
}

impl Pending {
    fn flush(&mut self, is_v6: bool, nw_proto: u8, out: &mut Vec<hw::DpAction>) {
        let p = std::mem::take(self);
        if let Some((src, dst)) = p.eth {
            out.push(hw::DpAction::Set(SetHeader::Eth { src, dst }));
        }
        if is_v6 {
            if p.ip6.is_some() || p.ip4_tos_ttl.is_some() {
                let [src, dst] = p.ip6.unwrap_or_default();
                let [tclass, hlimit] = p.ip4_tos_ttl.unwrap_or_default();
                out.push(hw::DpAction::Set(SetHeader::Ipv6 {
                    src,
                    dst,
                    tclass,
                    hlimit,
                    label: Masked::default(),
                }));
            }
        } else if p.ip4.is_some() || p.ip4_tos_ttl.is_some() {
            let [src, dst] = p.ip4.unwrap_or_default();
            let [tos, ttl] = p.ip4_tos_ttl.unwrap_or_default();
            out.push(hw::DpAction::Set(SetHeader::Ipv4 { src, dst, tos, ttl }));
        }
        if let Some([src, dst]) = p.l4 {
            out.push(hw::DpAction::Set(match nw_proto {
                6 => SetHeader::Tcp { src, dst },
                132 => SetHeader::Sctp { src, dst },
                _ => SetHeader::Udp { src, dst },
            }));
        }
        if p.arp {
            out.push(hw::DpAction::Set(SetHeader::Arp));
        }
        if p.nd {
            out.push(hw::DpAction::Set(SetHeader::Nd));
        }
    }
}

fn convert_actions(
    k: &nicflow_flow::FlowKey,
    actions: &[DpAction],
    ports: &BTreeMap<u32, ModelPort>,
    drop_meters: &std::collections::BTreeSet<u32>,
    notes: &mut Vec<&'static str>,
) -> Vec<hw::DpAction> {
    let is_v6 = k.dl_type == 0x86dd;
    let nw_proto = k.nw_proto;
    let mut out = Vec::new();
    let mut p = Pending::default();
    let mut tun_id: Option<u64> = None;
    let mut tun_md: BTreeMap<u8, u32> = BTreeMap::new();
    for a in actions {
        match a {
            DpAction::SetEthSrc(mac) => p.eth.get_or_insert_default().0 = Masked::exact(*mac),
            DpAction::SetEthDst(mac) => p.eth.get_or_insert_default().1 = Masked::exact(*mac),
            DpAction::SetIpv4Src(v) => p.ip4.get_or_insert_default()[0] = Masked::exact(*v),
            DpAction::SetIpv4Dst(v) => p.ip4.get_or_insert_default()[1] = Masked::exact(*v),
            DpAction::SetIpv6Src(v) => {
                p.ip6.get_or_insert_default()[0] = Masked::exact(u128_of(*v))
            }
            DpAction::SetIpv6Dst(v) => {
                p.ip6.get_or_insert_default()[1] = Masked::exact(u128_of(*v))
            }
            DpAction::SetTos(v) => p.ip4_tos_ttl.get_or_insert_default()[0] = Masked::exact(*v),
            DpAction::SetTtl(v) => p.ip4_tos_ttl.get_or_insert_default()[1] = Masked::exact(*v),
            DpAction::SetTpSrc(v) => p.l4.get_or_insert_default()[0] = Masked::exact(*v),
            DpAction::SetTpDst(v) => p.l4.get_or_insert_default()[1] = Masked::exact(*v),
            DpAction::SetArpSpa(_)
            | DpAction::SetArpTpa(_)
            | DpAction::SetArpSha(_)
            | DpAction::SetArpTha(_)
            | DpAction::SetArpOp(_) => p.arp = true,
            DpAction::SetNdTarget(_) | DpAction::SetNdSll(_) | DpAction::SetNdTll(_) => p.nd = true,
            DpAction::SetTunnelId(id) => tun_id = Some(*id),
            DpAction::SetTunnelMetadata { slot, value } => {
                tun_md.insert(*slot, *value);
            }
            DpAction::Drop(_) => {}
            other => {
                p.flush(is_v6, nw_proto, &mut out);
                match other {
                    DpAction::Output(port) => {
                        if let Some(cfg) = ports.get(port).and_then(|mp| mp.tunnel.as_ref()) {
                            out.push(hw::DpAction::SetTunnel(tunnel_set(cfg, tun_id, &tun_md)));
                        }
                        out.push(hw::DpAction::Output { port: *port });
                    }
                    DpAction::PushVlan { tpid, tci } => out.push(hw::DpAction::PushVlan {
                        tpid: *tpid,
                        tci: *tci,
                    }),
                    DpAction::PopVlan => out.push(hw::DpAction::PopVlan),
                    DpAction::SetVlanTci(tci) => {
                        out.push(hw::DpAction::PopVlan);
                        out.push(hw::DpAction::PushVlan {
                            tpid: 0x8100,
                            tci: *tci | 0x1000,
                        });
                    }
                    DpAction::Meter(id) => out.push(hw::DpAction::Meter {
                        id: *id,
                        drop_band: drop_meters.contains(id),
                    }),
                    DpAction::Controller { .. } => out.push(hw::DpAction::Userspace),
                    DpAction::Ct {
                        zone,
                        commit,
                        force,
                        mark,
                        label,
                        nat,
                    } => out.push(hw::DpAction::Ct(CtAction {
                        zone: *zone,
                        commit: *commit,
                        force: *force,
                        mark: *mark,
                        label: *label,
                        nat: nat.as_ref().map(|n| match n.kind {
                            None => hw::NatKind::Existing,
                            Some(nicflow_conntrack::NatKind::Src) => hw::NatKind::Src,
                            Some(nicflow_conntrack::NatKind::Dst) => hw::NatKind::Dst,
                        }),
                        helper: None,
                    })),
                    DpAction::Recirc(id) => out.push(hw::DpAction::Recirc { id: *id }),
                    DpAction::CtClear => out.push(hw::DpAction::CtClear),
                    _ => unreachable_action(other, &mut out, notes),
                }
            }
        }
    }
    p.flush(is_v6, nw_proto, &mut out);
    out
}

/// An action this conversion has no OVS form for: named, so the gate
/// refuses it rather than the flow passing unmodelled.
fn unreachable_action(a: &DpAction, out: &mut Vec<hw::DpAction>, _notes: &mut [&'static str]) {
    out.push(hw::DpAction::Other {
        name: a.to_string(),
    });
}

/// The outer header of an output to tunnel port `cfg`.
fn tunnel_set(cfg: &TunnelConfig, tun_id: Option<u64>, md: &BTreeMap<u8, u32>) -> TunnelSet {
    let id = match cfg.key {
        TunnelKey::Fixed(v) => v as u64,
        TunnelKey::Flow => tun_id.unwrap_or(0),
    };
    let mut flags = 4; // FLOW_TNL_F_KEY
    if cfg.df {
        flags |= 1;
    }
    if cfg.csum {
        flags |= 2;
    }
    let geneve_opts = cfg
        .tlv_map
        .iter()
        .filter_map(|map| {
            md.get(&map.slot).map(|v| GeneveOpt {
                class: map.class,
                typ: map.typ,
                value: v.to_be_bytes().to_vec(),
                mask: vec![0xff; 4],
            })
        })
        .collect();
    TunnelSet {
        tun_id: id,
        ipv4_src: u32::from(cfg.local_ip),
        ipv4_dst: u32::from(cfg.remote_ip),
        tos: cfg.tos,
        ttl: cfg.ttl,
        tp_dst: cfg.dst_port,
        flags,
        geneve_opts,
        ..TunnelSet::default()
    }
}

const INTERN_MAX: usize = 4096;

/// A reason string kept for the daemon's life: the profiles' refusals
/// carry filled-in printf arguments, the datapath's reasons are
/// `&'static str`. The set is bounded by the distinct refusals (a handful
/// of texts times the few values they print), not by flows or packets.
pub fn intern(s: String) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static SET: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut set = SET
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(r) = set.get(s.as_str()) {
        return r;
    }
    // Some texts carry a chain or meter number: bounded by what the
    // bridge's rules can name, but not by a constant, so the set is capped.
    if set.len() >= INTERN_MAX {
        return "profile: refused (reason not kept: more than 4096 distinct reasons; see offload-plan)";
    }
    let r: &'static str = Box::leak(s.into_boxed_str());
    set.insert(r);
    r
}

/// How a refusal reads in `dump-dp-flows` (`not_offloaded:REASON`):
/// the profile, the stage and the component's own words.
pub fn refusal_text(profile: nicflow_hwprofile::Profile, r: &nicflow_hwprofile::Refusal) -> String {
    format!("{}/{}: {}", profile.name(), r.stage.as_str(), r.reason)
}

/// The TC engine's emulation of a SmartNIC (`offload=profile:NAME`): the
/// modelled NIC with the flows the engine holds, so its resources fill up
/// and empty as the NIC's would.
pub struct Emulation {
    nic: nicflow_hwprofile::plan::Nic,
    ports: BTreeMap<u32, ModelPort>,
    /// The same ports as the model takes them (kept with `ports`, not
    /// rebuilt per flow).
    hw_ports: Vec<hw::Port>,
    /// The filter each kernel flow (manager id) holds on the NIC.
    held: std::collections::HashMap<u64, nicflow_hwprofile::tc::TcFlower>,
    /// Refusals by stage, for `stats`.
    pub refused: BTreeMap<&'static str, u64>,
    /// Kernel ids of established connections' entries (one per direction;
    /// two directions are one entry of the NIC's conntrack table) with the
    /// keys of the two flows they were composed from.
    ct_held: std::collections::HashMap<u64, [String; 2]>,
    ct_pending: u64,
    /// The ct flows (the `ct` pass and the recirculated pass) the NIC holds
    /// for the connections above, shared by all of them: the filter and
    /// how many composed entries use it.
    ct_parts: std::collections::HashMap<String, (nicflow_hwprofile::tc::TcFlower, u32)>,
}

impl Emulation {
    pub fn new(profile: nicflow_hwprofile::Profile) -> Emulation {
        Emulation {
            nic: nicflow_hwprofile::plan::Nic::new(profile),
            ports: BTreeMap::new(),
            hw_ports: Vec::new(),
            held: Default::default(),
            refused: BTreeMap::new(),
            ct_held: Default::default(),
            ct_pending: 0,
            ct_parts: Default::default(),
        }
    }

    pub fn profile(&self) -> nicflow_hwprofile::Profile {
        self.nic.profile
    }

    pub fn port_add(&mut self, no: u32, name: &str, hook: &OffloadHook) {
        self.ports.insert(no, model_port(no, name, hook));
        self.sync_hw_ports();
    }

    pub fn port_del(&mut self, no: u32) {
        self.ports.remove(&no);
        self.sync_hw_ports();
    }

    fn sync_hw_ports(&mut self) {
        self.hw_ports = self.ports.values().map(|p| p.port.clone()).collect();
    }

    /// Would the NIC take this flow now (its resources reserved if so)?
    /// The refusal is the text `dump-dp-flows` shows.
    pub fn admit(
        &mut self,
        matching: &Match,
        actions: &[DpAction],
        drop_meters: &std::collections::BTreeSet<u32>,
    ) -> Result<nicflow_hwprofile::tc::TcFlower, &'static str> {
        let c = convert(
            matching.key(),
            matching.mask(),
            actions,
            &self.ports,
            drop_meters,
        );
        self.nic.admit(&c.flow, &self.hw_ports).map_err(|r| {
            *self.refused.entry(r.stage.as_str()).or_default() += 1;
            intern(refusal_text(self.nic.profile, &r))
        })
    }

    /// Connections in the NIC's table: composed entries are per direction.
    fn ct_connections(&self) -> u64 {
        (self.ct_held.len() as u64 + self.ct_pending).div_ceil(2)
    }

    /// One flow of a connection's pair (the `ct` pass or the recirculated
    /// pass) on the NIC: admitted (its resources, ct zone and table
    /// reserved) the first time, shared after. The key names it for
    /// [`Emulation::release_part`].
    pub fn admit_part(
        &mut self,
        matching: &Match,
        actions: &[DpAction],
        drop_meters: &std::collections::BTreeSet<u32>,
    ) -> Result<String, &'static str> {
        let key = format!("{matching:?}|{actions:?}");
        if let Some((_, n)) = self.ct_parts.get_mut(&key) {
            *n += 1;
            return Ok(key);
        }
        let tc = self.admit(matching, actions, drop_meters)?;
        self.ct_parts.insert(key.clone(), (tc, 1));
        Ok(key)
    }

    pub fn release_part(&mut self, key: &str) {
        let gone = match self.ct_parts.get_mut(key) {
            Some((_, n)) => {
                *n = n.saturating_sub(1);
                *n == 0
            }
            None => false,
        };
        if gone {
            if let Some((tc, _)) = self.ct_parts.remove(key) {
                self.nic.release(&tc);
            }
        }
    }

    /// Room for one more direction of a connection in the NIC's
    /// conntrack table?
    pub fn ct_take(&mut self) -> Result<(), &'static str> {
        let before = self.ct_connections();
        self.ct_pending += 1;
        let want = self.ct_connections();
        let fit = self.nic.account_ct(want);
        if fit < want {
            self.ct_pending -= 1;
            self.nic.account_ct(before);
            *self.refused.entry("resource").or_default() += 1;
            return Err(intern(format!(
                "{}/resource: conntrack offload table full ({fit} connections)",
                self.nic.profile.name()
            )));
        }
        Ok(())
    }

    pub fn ct_give_back(&mut self) {
        self.ct_pending = self.ct_pending.saturating_sub(1);
        self.nic.account_ct(self.ct_connections());
    }

    /// The direction taken by [`Emulation::ct_take`] is kernel entry `id`,
    /// composed from the flows of `parts` ([`Emulation::admit_part`]).
    pub fn hold_ct(&mut self, id: u64, parts: [String; 2]) {
        self.ct_pending = self.ct_pending.saturating_sub(1);
        self.ct_held.insert(id, parts);
    }

    /// The flow admitted for `tc` is in the kernel as `id`.
    pub fn hold(&mut self, id: u64, tc: nicflow_hwprofile::tc::TcFlower) {
        if let Some(old) = self.held.insert(id, tc) {
            self.nic.release(&old);
        }
    }

    /// Give back an admitted filter that was not installed after all.
    pub fn give_back(&mut self, tc: &nicflow_hwprofile::tc::TcFlower) {
        self.nic.release(tc);
    }

    /// Kernel flow `id` is gone: its resources are free.
    pub fn release(&mut self, id: u64) {
        if let Some(tc) = self.held.remove(&id) {
            self.nic.release(&tc);
        }
        if let Some(parts) = self.ct_held.remove(&id) {
            for p in &parts {
                self.release_part(p);
            }
            self.nic.account_ct(self.ct_connections());
        }
    }

    pub fn resources(&self) -> BTreeMap<String, nicflow_hwprofile::Resource> {
        self.nic.resources()
    }

    /// For `stats`.
    pub fn status(&self) -> crate::datapath::ProfileStatus {
        crate::datapath::ProfileStatus {
            profile: self.nic.profile.name(),
            resources: self
                .resources()
                .into_iter()
                .map(|(k, r)| (k, (r.used, r.limit)))
                .collect(),
            refused: self.refused.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicflow_flow::{FlowKey, FlowMask};
    use nicflow_hwprofile::model::DpAction as A;

    fn vxlan_port(no: u32, key: &str) -> ModelPort {
        let mut o = nicflow_api::proto::PortOptions::new();
        for (k, v) in [
            ("underlay", "eth1"),
            ("local_ip", "198.18.20.2"),
            ("remote_ip", "198.18.20.1"),
            ("key", key),
        ] {
            o.insert(k.to_string(), v.to_string());
        }
        let cfg = TunnelConfig::from_options(TunnelKind::Vxlan, &o).unwrap();
        ModelPort {
            port: hw::Port {
                no,
                name: format!("vx{no}"),
                kind: PortKind::Tunnel {
                    tunnel: TunnelType::Vxlan,
                    dst_port: cfg.dst_port,
                },
            },
            tunnel: Some(cfg),
        }
    }

    fn rep(no: u32) -> ModelPort {
        ModelPort {
            port: hw::Port {
                no,
                name: format!("p{no}"),
                kind: PortKind::Representor,
            },
            tunnel: None,
        }
    }

    fn ports(v: Vec<ModelPort>) -> BTreeMap<u32, ModelPort> {
        v.into_iter().map(|p| (p.port.no, p)).collect()
    }

    /// An IPv4 TCP flow from port `in_port`, every field below L4 exact
    /// except the tunnel's and the registers'.
    fn tcp_flow(in_port: u32) -> (FlowKey, FlowMask) {
        let k = FlowKey {
            in_port,
            dl_type: 0x0800,
            nw_proto: 6,
            nw_src: 0xc612_0001,
            nw_dst: 0xc612_0002,
            tp_dst: 80,
            ..Default::default()
        };
        let mut m = FlowMask::catchall();
        m.0.in_port = u32::MAX;
        m.0.dl_type = 0xffff;
        m.0.nw_proto = 0xff;
        m.0.nw_dst = u32::MAX;
        m.0.tp_dst = 0xffff;
        (k, m)
    }

    /// ofproto/tunnel.c:tnl_wc_init (OVS v3.1.0): a flow received on a
    /// tunnel port matches the outer addresses, the VNI and the flags
    /// exactly, whatever nicflow's mask left out; the UDP port as the
    /// issue asks (OVS's TC translation sets enc_dst_port from the port).
    #[test]
    fn tunnel_flows_match_the_outer_header_exactly() {
        let (mut k, mut m) = tcp_flow(3);
        k.tun_id = 42;
        m.0.tun_id = u64::MAX;
        k.tun_flags = TUN_F_KEY;
        m.0.tun_flags = u16::MAX;
        let p = ports(vec![vxlan_port(3, "flow"), rep(1)]);
        let c = conv(k, m, &[DpAction::Output(1)], &p);
        let t = c.flow.matching.tunnel.expect("a tunnel match");
        assert_eq!(t.tun_id, Masked::exact(42));
        assert_eq!(t.ipv4_src, Masked::exact(0xc612_1401));
        assert_eq!(t.ipv4_dst, Masked::exact(0xc612_1402));
        assert_eq!(t.tp_dst, Masked::exact(4789));
        assert_eq!(t.flags, m_(4, 7), "FLOW_TNL_F_KEY of OVS's bits");
        assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
        assert!(c.notes[0].contains("tnl_wc_init"));
    }

    fn conv(k: FlowKey, m: FlowMask, a: &[DpAction], p: &BTreeMap<u32, ModelPort>) -> Converted {
        convert(&k, &m, a, p, &Default::default())
    }

    fn m_(value: u16, mask: u16) -> Masked<u16> {
        Masked { value, mask }
    }

    /// lib/odp-util.c:commit_odp_actions (OVS v3.1.0): the rewrites of one
    /// header before an output are one set action, L2 then L3 then L4.
    #[test]
    fn rewrites_of_one_header_are_one_set_before_the_output() {
        let (k, m) = tcp_flow(1);
        let acts = [
            DpAction::SetTpDst(8080),
            DpAction::SetEthSrc([2, 0, 0, 0, 0, 1]),
            DpAction::SetIpv4Dst(0xc612_0009),
            DpAction::SetEthDst([2, 0, 0, 0, 0, 2]),
            DpAction::SetTtl(9),
            DpAction::Output(2),
        ];
        let c = conv(k, m, &acts, &ports(vec![rep(1), rep(2)]));
        let a = &c.flow.actions;
        assert_eq!(a.len(), 4, "{a:?}");
        assert!(matches!(&a[0], A::Set(SetHeader::Eth { src, dst })
            if src.is_exact() && dst.is_exact()));
        assert!(
            matches!(&a[1], A::Set(SetHeader::Ipv4 { src, dst, ttl, .. })
            if src.is_wild() && dst.value == 0xc612_0009 && ttl.value == 9)
        );
        assert!(matches!(&a[2], A::Set(SetHeader::Tcp { src, dst })
            if src.is_wild() && dst.value == 8080));
        assert_eq!(a[3], A::Output { port: 2 });
    }

    /// lib/odp-util.c:commit_vlan_action (OVS v3.1.0): the kernel datapath
    /// has no VLAN rewrite; OVS pops and pushes.
    #[test]
    fn a_vlan_rewrite_is_pop_then_push() {
        let (k, m) = tcp_flow(1);
        let c = conv(
            k,
            m,
            &[DpAction::SetVlanTci(0x2005), DpAction::Output(2)],
            &ports(vec![rep(1), rep(2)]),
        );
        assert_eq!(
            c.flow.actions,
            vec![
                A::PopVlan,
                A::PushVlan {
                    tpid: 0x8100,
                    tci: 0x3005
                },
                A::Output { port: 2 }
            ]
        );
    }

    /// An output to a tunnel port is `set(tunnel(...)),output` with the
    /// port's endpoints and the flow's `set_tunnel` (key=flow).
    #[test]
    fn an_output_to_a_tunnel_sets_the_outer_header_first() {
        let (k, m) = tcp_flow(1);
        let p = ports(vec![rep(1), vxlan_port(3, "flow")]);
        let c = conv(k, m, &[DpAction::SetTunnelId(7), DpAction::Output(3)], &p);
        match &c.flow.actions[..] {
            [A::SetTunnel(t), A::Output { port: 3 }] => {
                assert_eq!(t.tun_id, 7);
                assert_eq!(t.ipv4_src, 0xc612_1402);
                assert_eq!(t.ipv4_dst, 0xc612_1401);
                assert_eq!(t.tp_dst, 4789);
                assert_eq!(t.flags & 4, 4, "FLOW_TNL_F_KEY");
            }
            other => panic!("{other:?}"),
        }
    }

    /// Registers never reach an OVS datapath flow; a "no tag" VLAN match
    /// is no VLAN key (the ODP key has no encap(vlan)).
    #[test]
    fn slow_path_fields_and_no_tag_matches_are_not_keys() {
        let (mut k, mut m) = tcp_flow(1);
        k.regs[0] = 5;
        m.0.regs[0] = u32::MAX;
        m.0.metadata = u64::MAX;
        m.0.vlan_tci = 0x1fff;
        let c = conv(k, m, &[DpAction::Output(2)], &ports(vec![rep(1)]));
        assert!(c.flow.matching.vlans.is_empty());
        assert_eq!(c.notes.len(), 1);
        assert!(c.notes[0].contains("registers"), "{:?}", c.notes);
        // A tag present is one.
        k.vlan_tci = 0x1000 | 10;
        m.0.vlan_tci = 0x1fff;
        let c = conv(k, m, &[DpAction::Output(2)], &ports(vec![rep(1)]));
        assert_eq!(c.flow.matching.vlans.len(), 1);
        assert_eq!(c.flow.matching.vlans[0].tci, m_(0x100a, 0x1fff));
    }

    /// lib/odp-util.c:odp_flow_key_from_mask (OVS v3.1.0): an IPv4 flow's
    /// mask carries no IPv6, ND or ARP bits, whatever subtables nicflow's
    /// classifier probed; a UDP flow none of TCP's flags.
    #[test]
    fn masks_of_other_layers_are_not_in_the_datapath_flow() {
        let (mut k, mut m) = tcp_flow(1);
        k.nw_proto = 17;
        m.0.ipv6_src = [0xff; 16];
        m.0.ipv6_label = 0xfffff;
        m.0.nd_target = [0xff; 16];
        m.0.arp_sha = [0xff; 6];
        m.0.tcp_flags = 0xfff;
        let c = conv(k, m, &[DpAction::Output(2)], &ports(vec![rep(1), rep(2)]));
        let d = &c.flow.matching;
        assert!(d.ipv6_src.is_wild() && d.ipv6_label.is_wild() && d.nd_target.is_wild());
        assert!(d.arp_sha.is_wild() && d.tcp_flags.is_wild());
        assert_eq!(d.tp_dst, Masked::exact(80), "UDP ports stay");
        assert_eq!(d.ipv4_dst, Masked::exact(0xc612_0002));
    }

    /// An established connection under a profile: its two ct flows are
    /// held once for all connections through them, its two directions
    /// are one entry of the NIC's conntrack table, and everything comes
    /// back when the entries go.
    #[test]
    fn emulated_connections_hold_their_ct_flows_and_one_table_entry() {
        use nicflow_hwprofile::Profile;
        let mut e = Emulation::new(Profile::Cx7);
        e.ports = ports(vec![rep(1), rep(2)]);
        e.sync_hw_ports();
        let before = e.resources();
        let none = Default::default();
        let (k, mut m) = tcp_flow(1);
        m.0.ct_state = 0x20;
        let first = (
            Match::new(k, m),
            vec![
                DpAction::Ct {
                    zone: 0,
                    commit: false,
                    force: false,
                    mark: None,
                    label: None,
                    nat: None,
                },
                DpAction::Recirc(1),
            ],
        );
        let (mut k2, mut m2) = tcp_flow(1);
        k2.recirc_id = 1;
        k2.ct_state = 0x22; // +trk+est
        m2.0.recirc_id = u32::MAX;
        m2.0.ct_state = 0x23;
        let second = (Match::new(k2, m2), vec![DpAction::Output(2)]);
        for id in [10, 11] {
            let a = e
                .admit_part(&first.0, &first.1, &none)
                .expect("ct pass held");
            let b = e
                .admit_part(&second.0, &second.1, &none)
                .expect("+est pass held");
            e.ct_take().expect("room in the ct table");
            e.hold_ct(id, [a, b]);
        }
        assert_eq!(e.ct_parts.len(), 2, "the two ct flows, shared");
        assert_eq!(
            e.resources()["ct_entries"].used,
            2,
            "one connection, two directions"
        );
        e.release(10);
        e.release(11);
        assert_eq!(e.resources(), before);
        assert!(e.ct_parts.is_empty());
    }

    /// The emulation admits, holds and releases: resources come back when
    /// a flow goes, and a refusal reads `PROFILE/STAGE: driver's words`.
    #[test]
    fn emulation_counts_resources_and_says_why() {
        use nicflow_hwprofile::Profile;
        let mut e = Emulation::new(Profile::Agilio);
        e.ports = ports(vec![rep(1), rep(2)]);
        e.sync_hw_ports();
        let used = |e: &Emulation| e.resources()["mask_ids"].used;
        let (k, m) = tcp_flow(1);
        let tc = e
            .admit(
                &Match::new(k, m),
                &[DpAction::Output(2)],
                &Default::default(),
            )
            .expect("agilio holds a TCP flow to a representor");
        e.hold(10, tc);
        assert_eq!(used(&e), 1);
        // The same mask shares the mask id (nfp metadata.c:nfp_check_mask_add).
        let mut k2 = k;
        k2.tp_dst = 443;
        let tc = e
            .admit(
                &Match::new(k2, m),
                &[DpAction::Output(2)],
                &Default::default(),
            )
            .unwrap();
        e.hold(11, tc);
        assert_eq!(used(&e), 1);
        assert_eq!(e.resources()["stats_contexts"].used, 2);
        e.release(10);
        e.release(11);
        assert_eq!(used(&e), 0);
        assert_eq!(e.resources()["stats_contexts"].used, 0);
        // nfp offload.c:nfp_flower_calculate_key_layers: ICMP type/code.
        let (mut k, mut m) = tcp_flow(1);
        k.nw_proto = 1;
        k.tp_src = 8;
        m.0.tp_src = 0xffff;
        m.0.tp_dst = 0;
        let r = e
            .admit(
                &Match::new(k, m),
                &[DpAction::Output(2)],
                &Default::default(),
            )
            .unwrap_err();
        assert_eq!(r, "agilio/driver: unsupported offload: match not supported");
        assert_eq!(e.refused.get("driver"), Some(&1));
        assert_eq!(used(&e), 0, "a refusal takes nothing");
    }
}
