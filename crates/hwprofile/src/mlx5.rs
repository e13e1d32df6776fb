//! Stage 2 and 3 for NVIDIA eSwitches: Linux 6.1 `mlx5_core` in switchdev
//! mode, as OVS 3.1's TC flower filters reach it.
//!
//! Place in a packet's path: none. This is the model of what happens in
//! the kernel when OVS installs a flower filter on a representor (the
//! driver's own block), on a tunnel device or an OVS internal port (an
//! indirect block the uplink representor binds): `mlx5e_configure_flower`
//! → `__mlx5e_add_fdb_flow` → `parse_cls_flower` (matches), then
//! `mlx5_tc_ct_match_add` (ct matches), `parse_tc_fdb_actions` (actions,
//! `en/tc/act/*.c`), `mlx5e_tc_add_fdb_flow` (chains, internal ports,
//! encap). [`Mlx5::check`] replays those checks on the filter, in the
//! driver's order, and refuses with the first message the driver sets.
//!
//! The filter is rebuilt the way the kernel hands it to the driver: OVS's
//! `tunnel_key release` before the first output of a flow received on a
//! tunnel, `skbedit ptype host` before a `mirred ingress`, the last
//! output a redirect and earlier ones mirrors, one flow-action entry per
//! rewritten field; then the driver's reorder (ct actions first) and its
//! split of a rule at a "multi-table" action (ct, police) that is not
//! last (`parse_tc_actions`).
//!
//! Where an outer function overwrites a specific extack with a generic
//! one (`parse_tunnel_attr`'s "Failed to parse tunnel attributes"), the
//! reason is the specific message, which the driver also logs with
//! `netdev_warn`. Where the driver refuses without a message, the reason
//! names the function and the check.
//!
//! Stage 3 ([`Mlx5::reserve`]) models what the accepted filter takes:
//! its FDB table `(chain, prio, level)` from the firmware table pools
//! (`fs_ft_pool.c`, tables sized `POOL_NEXT_SIZE` by `lib/fs_chains.c`),
//! a flow group per distinct match mask inside it (`fs_core.c`'s
//! autogroups: `large_group_num` groups of `(size - 2) / (groups + 1)`
//! entries, then one-entry groups), modify-header actions per rule,
//! counters, encap entries (deduplicated on the whole tunnel key),
//! tunnel mappings, Geneve TLV objects, VXLAN UDP ports, meters, the
//! conntrack zones' tables; [`Mlx5::account_ct`] the established
//! connections the ct tables hold.

mod caps;
mod res;
#[cfg(test)]
mod tests;

pub use caps::Caps;

use crate::model::{cs, Port, PortKind, TunnelType};
use crate::tc::{csum_flag, PeditField, TcAction, TcFlower};
use crate::{Driver, Refusal, Resource, Stage};
use res::State;
use std::collections::BTreeMap;

/// A driver source, `file:function`, under the mlx5 core directory.
macro_rules! src {
    ($f:literal) => {
        concat!("drivers/net/ethernet/mellanox/mlx5/core/", $f)
    };
}
pub(crate) use src;

fn drv(source: &'static str, reason: impl Into<String>) -> Refusal {
    Refusal::new(Stage::Driver, source, reason)
}

// MLX5_FLOW_CONTEXT_ACTION_* the model tracks.
const FWD: u32 = 1 << 0;
const DROP: u32 = 1 << 1;
const MOD_HDR: u32 = 1 << 2;
const DECAP: u32 = 1 << 3;
const VLAN_POP: u32 = 1 << 4;
const VLAN_PUSH: u32 = 1 << 5;
const ASO: u32 = 1 << 6;
const CT: u32 = 1 << 7;

/// `IANA_VXLAN_UDP_PORT`, registered by `mlx5_vxlan_create`.
const VXLAN_PORT: u16 = 4789;
/// `GENEVE_UDP_PORT`, the only port `tc_tun_geneve.c` accepts.
const GENEVE_PORT: u16 = 6081;
/// `MLX5_MAX_FLOW_FWD_VPORTS` (`eswitch.h`).
const MAX_FWD: u32 = 32;
/// `FDB_TC_MAX_CHAIN` (`fs_core.h`) without `ignore_flow_level`.
const FDB_TC_MAX_CHAIN: u32 = 3;

/// The encap entry key (`struct ip_tunnel_key` + tunnel type + Geneve
/// options, `mlx5e_tc_tun_encap_info_equal_geneve`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EncapKey {
    pub tunnel: Option<TunnelType>,
    pub id: u64,
    pub v4: (u32, u32),
    pub v6: (u128, u128),
    pub tos: u8,
    pub ttl: u8,
    pub tp_dst: u16,
    pub csum: bool,
    pub dont_frag: bool,
    pub opts: Vec<(u16, u8, Vec<u8>)>,
}

impl EncapKey {
    /// The key the encap table hashes (`hash_encap_info`).
    pub fn id(&self) -> String {
        format!("{:?}", self)
    }
}

/// One `struct mlx5_flow_attr` of a filter: the rule in the chain table,
/// then one post-action rule per split.
#[derive(Clone, Debug, Default)]
pub(crate) struct Attr {
    pub action: u32,
    pub out_count: u32,
    pub split_count: u32,
    pub dest_int_port: bool,
    pub dest_chain: u32,
    /// Register writes queued in `mod_hdr_acts` before the pedits.
    pub reg_writes: u32,
    pub pedits: Vec<PeditField>,
    pub encaps: Vec<EncapKey>,
    pub total_vlan: u8,
}

impl Attr {
    /// Modify-header actions this rule would carry (`offload_pedit_fields`
    /// writes one per field, a MAC two, an IPv6 address four).
    pub fn mod_hdr_actions(&self) -> u32 {
        self.reg_writes
            + self
                .pedits
                .iter()
                .map(|f| pedit_hw_actions(*f))
                .sum::<u32>()
    }
}

/// The HW modify actions of a field (`fields[]` in `en_tc.c`).
fn pedit_hw_actions(f: PeditField) -> u32 {
    match f {
        PeditField::EthSrc | PeditField::EthDst => 2,
        PeditField::Ipv6Src | PeditField::Ipv6Dst => 4,
        _ => 1,
    }
}

/// What the parse of an accepted filter leaves for stage 3.
#[derive(Clone, Debug, Default)]
pub(crate) struct Parsed {
    pub attrs: Vec<Attr>,
    /// The OVS prio's protocol (the flower `eth_type`).
    pub protocol: u16,
    /// The match mask as the driver writes it (criteria + enable bits).
    pub mask: String,
    /// A fast-path rule plus a forward rule at level 1
    /// (`mlx5_eswitch_add_fwd_rule`).
    pub split: bool,
    pub ct_zone: Option<u16>,
    pub meter: Option<u32>,
    /// `mlx5e_get_flow_tunnel_id`: the tunnel key mapped (chain > 0, or
    /// chain 0 with goto), and whether the options get an id too.
    pub tunnel_mapping: Option<String>,
    pub enc_opts_mapping: Option<String>,
    /// The Geneve TLV option object matched (class, type).
    pub geneve_opt: Option<(u16, u8)>,
    /// VXLAN UDP ports other than 4789 the filter needs registered, and
    /// whether an encap (rather than a decap match) needs it.
    pub vxlan_ports: Vec<(u16, bool)>,
}

/// A flow-action entry as the driver iterates them.
#[derive(Clone, Debug)]
enum Act {
    Ct {
        clear: bool,
        zone: u16,
    },
    Police(u32),
    Mangle(PeditField),
    Csum(u32),
    VlanPush {
        tpid: u16,
        prio: u8,
    },
    VlanPop,
    TunEncap(EncapKey),
    TunDecap,
    Ptype,
    Mirred {
        port: Port,
        ingress: bool,
        last: bool,
    },
    Goto(u32),
    Drop,
}

impl Act {
    fn is_ct(&self) -> bool {
        matches!(self, Act::Ct { .. })
    }
    /// `is_multi_table_act`: ct (not clear) and police split the rule.
    fn multi_table(&self) -> bool {
        matches!(self, Act::Ct { clear: false, .. } | Act::Police(_))
    }
}

/// The entries the kernel builds from OVS's actions (`lib/tc.c`
/// `nl_msg_put_flower_acts` and `tc_setup_flow_action`).
fn flow_actions(f: &TcFlower) -> Vec<Act> {
    let from_tunnel = f.key.tunnel.is_some() || matches!(f.indev.kind, PortKind::Tunnel { .. });
    let mut released = false;
    let mut out = Vec::new();
    let n = f.actions.len();
    for (i, a) in f.actions.iter().enumerate() {
        match a {
            TcAction::Mirred { port, ingress } => {
                if from_tunnel && !released {
                    out.push(Act::TunDecap);
                    released = true;
                }
                if *ingress {
                    out.push(Act::Ptype);
                }
                out.push(Act::Mirred {
                    port: port.clone(),
                    ingress: *ingress,
                    last: i + 1 == n,
                });
            }
            TcAction::TunnelSet {
                tunnel,
                id,
                ipv4_src,
                ipv4_dst,
                ipv6_src,
                ipv6_dst,
                tos,
                ttl,
                tp_dst,
                csum,
                dont_frag,
                opts,
            } => {
                if from_tunnel && !released {
                    out.push(Act::TunDecap);
                    released = true;
                }
                out.push(Act::TunEncap(EncapKey {
                    tunnel: Some(*tunnel),
                    id: *id,
                    v4: (*ipv4_src, *ipv4_dst),
                    v6: (*ipv6_src, *ipv6_dst),
                    tos: *tos,
                    ttl: *ttl,
                    tp_dst: *tp_dst,
                    csum: *csum,
                    dont_frag: *dont_frag,
                    opts: opts
                        .iter()
                        .map(|o| (o.class, o.typ, o.value.clone()))
                        .collect(),
                }));
            }
            TcAction::Pedit { fields } => out.extend(fields.iter().map(|f| Act::Mangle(*f))),
            TcAction::Csum { flags } => out.push(Act::Csum(*flags)),
            TcAction::VlanPush { tpid, prio, .. } => out.push(Act::VlanPush {
                tpid: *tpid,
                prio: *prio,
            }),
            TcAction::VlanPop => out.push(Act::VlanPop),
            TcAction::Ct(c) => out.push(Act::Ct {
                clear: false,
                zone: c.zone,
            }),
            TcAction::CtClear => out.push(Act::Ct {
                clear: true,
                zone: 0,
            }),
            TcAction::Goto { chain } => out.push(Act::Goto(*chain)),
            TcAction::Police { meter } => out.push(Act::Police(*meter)),
            TcAction::Drop => out.push(Act::Drop),
        }
    }
    if out.is_empty() {
        // OVS writes `gact drop` for a flow without actions.
        out.push(Act::Drop);
    }
    out
}

/// The mlx5 conntrack state bits a flower ct_state match becomes
/// (`mlx5_tc_ct_match_add`): (value, mask) over trk/est/rpl/rel/inv.
fn mlx5_ctstate(f: &TcFlower) -> (u32, u32) {
    const TRK: u32 = 1 << 2;
    const EST: u32 = 1 << 1;
    const RPL: u32 = 1 << 4;
    const REL: u32 = 1 << 5;
    const INV: u32 = 1 << 6;
    let m = f.key.ct_state.mask;
    let on = f.key.ct_state.value & m;
    let off = on ^ m;
    let mut v = 0;
    let mut mask = 0;
    for (bit, hw) in [
        (cs::TRACKED, TRK),
        (cs::ESTABLISHED, EST),
        (cs::REPLY_DIR, RPL),
    ] {
        if on & bit != 0 {
            v |= hw;
        }
        if m & bit != 0 {
            mask |= hw;
        }
    }
    if off & cs::RELATED != 0 {
        mask |= REL;
    }
    if off & cs::INVALID != 0 {
        mask |= INV;
    }
    (v, mask)
}

pub struct Mlx5 {
    caps: Caps,
    state: State,
}

impl Mlx5 {
    pub fn new(caps: Caps) -> Mlx5 {
        let state = State::new(&caps);
        Mlx5 { caps, state }
    }

    fn max_chain(&self) -> u32 {
        if !self.caps.chains_and_prios {
            1
        } else if self.caps.ignore_flow_level {
            u32::MAX - 1
        } else {
            FDB_TC_MAX_CHAIN
        }
    }

    /// Stage 2: the driver's parse, returning what stage 3 needs.
    pub(crate) fn parse(&self, f: &TcFlower) -> Result<Parsed, Refusal> {
        let c = &self.caps;
        let k = &f.key;
        let mut p = Parsed::default();
        let mut attr0 = Attr::default();

        // The block the filter reaches (en/rep/tc.c): a representor's own,
        // or an indirect block for a tunnel device / OVS internal port.
        match &f.indev.kind {
            PortKind::Uplink | PortKind::Representor => {}
            PortKind::Tunnel { tunnel, .. } => {
                let ok = match tunnel {
                    TunnelType::Vxlan => c.vxlan_encap_decap,
                    TunnelType::Geneve => c.flex_geneve,
                };
                if !ok {
                    return Err(drv(
                        src!("en/rep/tc.c:mlx5e_rep_indr_setup_block"),
                        format!(
                            "mlx5e_rep_indr_setup_block: {} device {} cannot be offloaded (mlx5e_tc_tun_device_to_offload: no {} support): no driver binds its block",
                            tunnel_name(*tunnel),
                            f.indev.name,
                            match tunnel {
                                TunnelType::Vxlan => "vxlan_encap_decap",
                                TunnelType::Geneve => "flex parser GENEVE",
                            }
                        ),
                    ));
                }
            }
            PortKind::Internal => {
                if !c.int_port {
                    return Err(drv(
                        src!("en/rep/tc.c:mlx5e_rep_indr_setup_block"),
                        format!("mlx5e_rep_indr_setup_block: OVS internal port {} not offloaded (mlx5e_tc_int_port_supported false): no driver binds its block", f.indev.name),
                    ));
                }
            }
            PortKind::Other { what } => {
                return Err(drv(
                    src!("en/rep/tc.c:mlx5e_rep_indr_setup_block"),
                    format!("mlx5e_rep_indr_setup_block: {} ({}) is not an eSwitch port, tunnel device or OVS internal port: no driver binds its block", f.indev.name, what),
                ));
            }
        }

        // __parse_cls_flower: dissector keys the driver knows. OVS writes
        // FLOW_DISSECTOR_KEY_ARP for ARP fields.
        let arp = k.eth_type.mask != 0 && k.eth_type.value == 0x0806;
        if arp
            && (!k.nw_proto.is_wild()
                || !k.ipv4_src.is_wild()
                || !k.ipv4_dst.is_wild()
                || !k.arp_sha.is_wild()
                || !k.arp_tha.is_wild())
        {
            return Err(drv(src!("en_tc.c:__parse_cls_flower"), "Unsupported key"));
        }

        // Tunnel matches (parse_tunnel_attr, en/tc_tun*.c).
        let tunnel_dev = match f.indev.kind {
            PortKind::Tunnel { tunnel, .. } => Some(tunnel),
            _ => None,
        };
        let has_goto = f.actions.iter().any(|a| matches!(a, TcAction::Goto { .. }));
        if let Some(tt) = tunnel_dev {
            let needs_mapping = f.chain != 0;
            let sets_mapping = f.chain == 0 && has_goto;
            if (needs_mapping || sets_mapping) && !c.reg_c1_loopback {
                return Err(drv(
                    src!("en_tc.c:parse_tunnel_attr"),
                    "Chains on tunnel devices isn't supported without register loopback support",
                ));
            }
            self.parse_tunnel(f, tt, &mut p)?;
            if f.chain == 0 {
                attr0.action |= DECAP;
            }
            if needs_mapping || sets_mapping {
                // mlx5e_get_flow_tunnel_id
                let opts = k
                    .tunnel
                    .as_ref()
                    .map(|t| t.geneve_opts.as_slice())
                    .unwrap_or(&[]);
                let dont_care = opts.iter().all(|o| o.mask.iter().all(|b| *b == 0));
                p.tunnel_mapping = Some(format!(
                    "{}:{:?}",
                    f.indev.no,
                    k.tunnel.as_ref().map(|t| (
                        (t.tun_id.value & t.tun_id.mask, t.tun_id.mask),
                        (t.ipv4_src, t.ipv4_dst, t.ipv6_src, t.ipv6_dst),
                        (t.tos, t.ttl, t.tp_src, t.tp_dst),
                    ))
                ));
                if !dont_care {
                    // enc_opts_is_dont_care_or_full_match: OVS matches an
                    // option's class and type fully; a partial match is
                    // of the data bytes.
                    if opts.iter().any(|o| o.mask.iter().any(|b| *b != 0xff)) {
                        return Err(drv(
                            src!("en_tc.c:enc_opts_is_dont_care_or_full_match"),
                            "Partial match of tunnel options in chain > 0 isn't supported",
                        ));
                    }
                    p.enc_opts_mapping = Some(format!("{:?}", opts));
                }
                if sets_mapping {
                    attr0.reg_writes += 1;
                    attr0.action |= MOD_HDR;
                }
            }
            self.verify_tunnel_ecn(f)?;
        }
        // parse_tunnel_attr runs only for a tunnel filter device; elsewhere
        // the enc_* keys pass the used-keys test and are not matched.

        // VLAN / CVLAN.
        if k.vlans.len() > 1 && !k.vlans[1].tci.is_wild() && !c.outer_second_vid {
            return Err(drv(
                src!("en_tc.c:__parse_cls_flower"),
                "Matching on CVLAN is not supported",
            ));
        }
        // Fragments: OVS masks FLOW_DIS_FIRST_FRAG only for a fragment
        // whose LATER bit is matched (netdev-offload-tc.c).
        if k.nw_frag.mask & 1 != 0 && k.nw_frag.value & 1 != 0 && k.nw_frag.mask & 2 != 0 {
            return Err(drv(
                src!("en_tc.c:__parse_cls_flower"),
                "Match on frag first/later is not supported",
            ));
        }
        if !k.nw_ttl.is_wild() && !c.outer_ipv4_ttl {
            return Err(drv(
                src!("en_tc.c:__parse_cls_flower"),
                "Matching on TTL is not supported",
            ));
        }
        let proto = k.nw_proto.value & k.nw_proto.mask;
        let ip = k.eth_type.mask != 0 && matches!(k.eth_type.value, 0x0800 | 0x86dd);
        if ip && (!k.tp_src.is_wild() || !k.tp_dst.is_wild()) {
            match proto {
                6 | 17 => {}
                1 if k.eth_type.value == 0x0800 => {
                    if !c.flex_icmp {
                        return Err(drv(
                            src!("en_tc.c:__parse_cls_flower"),
                            "Match on Flex protocols for ICMP is not supported",
                        ));
                    }
                }
                58 if k.eth_type.value == 0x86dd => {
                    if !c.flex_icmpv6 {
                        return Err(drv(
                            src!("en_tc.c:__parse_cls_flower"),
                            "Match on Flex protocols for ICMPV6 is not supported",
                        ));
                    }
                }
                _ => {
                    return Err(drv(
                        src!("en_tc.c:__parse_cls_flower"),
                        "Only UDP and TCP transports are supported for L4 matching",
                    ))
                }
            }
        }

        // mlx5_tc_ct_match_add
        let ct_matched = !k.ct_state.is_wild()
            || !k.ct_zone.is_wild()
            || !k.ct_mark.is_wild()
            || !k.ct_label.is_wild();
        if ct_matched {
            if !c.ct_offload {
                return Err(drv(
                    src!("en/tc_ct.c:mlx5_tc_ct_match_add"),
                    "offload of ct matching isn't available",
                ));
            }
            let known =
                cs::TRACKED | cs::ESTABLISHED | cs::NEW | cs::REPLY_DIR | cs::RELATED | cs::INVALID;
            if k.ct_state.mask & !known != 0 {
                return Err(drv(
                    src!("en/tc_ct.c:mlx5_tc_ct_match_add"),
                    "only ct_state trk, est, new and rpl are supported for offload",
                ));
            }
            let on = k.ct_state.value & k.ct_state.mask;
            for (bit, msg) in [
                (cs::RELATED, "matching on ct_state +rel isn't supported"),
                (cs::INVALID, "matching on ct_state +inv isn't supported"),
                (cs::NEW, "matching on ct_state +new isn't supported"),
            ] {
                if on & bit != 0 {
                    return Err(drv(src!("en/tc_ct.c:mlx5_tc_ct_match_add"), msg));
                }
            }
        }

        // parse_tc_fdb_actions
        let acts = flow_actions(f);
        let mut ordered: Vec<Act> = acts.iter().filter(|a| a.is_ct()).cloned().collect();
        ordered.extend(acts.iter().filter(|a| !a.is_ct()).cloned());
        let n = ordered.len();
        let mut st = ParseState::default();
        let mut attrs: Vec<Attr> = Vec::new();
        let mut cur = attr0;
        let mut attr0_ct_clear = false;
        for (i, act) in ordered.iter().enumerate() {
            self.parse_act(
                f,
                act,
                &mut st,
                &mut cur,
                &mut p,
                attrs.is_empty(),
                &mut attr0_ct_clear,
            )?;
            st.actions |= cur.action;
            if act.multi_table() && i + 1 < n {
                self.post_parse(&ordered, &mut st, &mut cur)?;
                attrs.push(std::mem::take(&mut cur));
            }
        }
        self.post_parse(&ordered, &mut st, &mut cur)?;
        attrs.push(cur);
        p.attrs = attrs;
        let a0 = &p.attrs[0];

        let filter_internal = matches!(f.indev.kind, PortKind::Internal);
        if (filter_internal || a0.dest_int_port) && a0.out_count > 1 {
            return Err(drv(
                src!("en_tc.c:parse_tc_fdb_actions"),
                "Rules with internal port can have only one destination",
            ));
        }
        if (tunnel_dev.is_some() || filter_internal) && a0.dest_int_port {
            return Err(drv(
                src!("en_tc.c:parse_tc_fdb_actions"),
                "Forwarding from tunnel/internal port to internal port is not supported",
            ));
        }

        // actions_match_supported
        let actions = st.actions;
        if actions & (FWD | DROP) == 0 {
            return Err(drv(
                src!("en_tc.c:actions_match_supported"),
                "Rule must have at least one forward/drop action",
            ));
        }
        if actions & FWD != 0 && actions & DROP != 0 {
            return Err(drv(
                src!("en_tc.c:actions_match_supported"),
                "Rule cannot support forward+drop action",
            ));
        }
        if actions & MOD_HDR != 0 && actions & DROP != 0 {
            return Err(drv(
                src!("en_tc.c:actions_match_supported"),
                "Drop with modify header action is not supported",
            ));
        }
        let ct_flow = st.ct && !attr0_ct_clear;
        let mut no_trk = false;
        if actions & MOD_HDR != 0 {
            no_trk = self.modify_header_match_supported(f, &ordered, ct_flow, attr0_ct_clear)?;
        }
        let a0 = &p.attrs[0];
        if a0.split_count > 0 && ct_flow && !c.reg_c_preserve {
            return Err(drv(
                src!("en_tc.c:actions_match_supported_fdb"),
                "Can't offload mirroring with action ct",
            ));
        }
        if a0.split_count > 0 && !c.has_fwd_fdb {
            return Err(drv(
                src!("en_tc.c:actions_match_supported_fdb"),
                "current firmware doesn't support split rule for port mirroring",
            ));
        }

        // mlx5e_tc_add_fdb_flow
        if f.chain > self.max_chain() {
            return Err(drv(
                src!("en_tc.c:mlx5e_tc_add_fdb_flow"),
                "Requested chain is out of supported range",
            ));
        }
        if filter_internal {
            if f.chain != 0 {
                return Err(drv(
                    src!("en_tc.c:mlx5e_tc_add_fdb_flow"),
                    "Internal port rule is only supported on chain 0",
                ));
            }
            if a0.dest_chain != 0 {
                return Err(drv(
                    src!("en_tc.c:mlx5e_tc_add_fdb_flow"),
                    "Internal port rule offload doesn't support goto action",
                ));
            }
        }
        for a in &p.attrs {
            for (i, e) in a.encaps.iter().enumerate() {
                self.check_encap(e, &a.encaps[..i], &mut p.vxlan_ports)?;
            }
        }
        p.split = p.attrs[0].split_count > 0 && !st.ct;
        p.protocol = match k.vlans.first() {
            Some(v) => v.tpid,
            None => k.eth_type.value & k.eth_type.mask,
        };
        p.mask = self.mask_key(f, no_trk);
        Ok(p)
    }

    #[allow(clippy::too_many_arguments)]
    fn parse_act(
        &self,
        f: &TcFlower,
        act: &Act,
        st: &mut ParseState,
        attr: &mut Attr,
        p: &mut Parsed,
        first_attr: bool,
        attr0_ct_clear: &mut bool,
    ) -> Result<(), Refusal> {
        let c = &self.caps;
        match act {
            Act::Ct { clear, zone, .. } => {
                if st.ct && !clear {
                    return Err(drv(
                        src!("en/tc/act/ct.c:tc_act_can_offload_ct"),
                        "Multiple CT actions are not supported",
                    ));
                }
                if *clear && st.ct_clear {
                    return Ok(());
                }
                if !c.ct_offload {
                    return Err(drv(
                        src!("en/tc_ct.c:mlx5_tc_ct_parse_action"),
                        "offload of ct action isn't available",
                    ));
                }
                if first_attr {
                    *attr0_ct_clear = *clear;
                }
                attr.split_count = attr.out_count;
                if *clear {
                    st.ct_clear = true;
                } else {
                    attr.action |= CT;
                    st.ct = true;
                    p.ct_zone = Some(*zone);
                }
            }
            Act::Police(m) => {
                if !c.flow_meter_aso {
                    return Err(drv(
                        src!("en/tc/act/police.c:tc_act_can_offload_police"),
                        "tc_act_can_offload_police: no flow meters (mlx5e_get_flow_meters: firmware lacks FLOW_METER_ASO), -EOPNOTSUPP",
                    ));
                }
                attr.action |= ASO;
                p.meter = Some(*m);
            }
            Act::Mangle(field) => {
                if c.max_modify_header_actions == 0 {
                    return Err(drv(
                        src!("en/tc/act/pedit.c:mlx5e_tc_act_pedit_parse_action"),
                        "The pedit offload action is not supported",
                    ));
                }
                attr.pedits.push(*field);
                attr.action |= MOD_HDR;
                attr.split_count = attr.out_count;
            }
            Act::Csum(flags) => {
                if attr.action & MOD_HDR == 0 {
                    return Err(drv(
                        src!("en/tc/act/csum.c:csum_offload_supported"),
                        "TC csum action is only offloaded with pedit",
                    ));
                }
                if flags & !(csum_flag::IPV4HDR | csum_flag::TCP | csum_flag::UDP) != 0 {
                    return Err(drv(
                        src!("en/tc/act/csum.c:csum_offload_supported"),
                        "can't offload TC csum action for some header/s",
                    ));
                }
            }
            Act::VlanPush { tpid, prio } => {
                if attr.action & VLAN_POP != 0 {
                    // pop + push: a VID rewrite, one modify action
                    // (en/tc/act/vlan_mangle.c).
                    let s = src!("en/tc/act/vlan_mangle.c:mlx5e_tc_act_vlan_add_rewrite_action");
                    let outer = f.key.vlans.first();
                    let cvlan = outer.is_some_and(|v| v.tpid != 0x88a8 && !v.tci.is_wild());
                    if !cvlan {
                        return Err(drv(s, "VLAN rewrite action must have VLAN protocol match"));
                    }
                    let tci = outer.map(|v| v.tci).unwrap_or_default();
                    let matched_prio = ((tci.value & tci.mask) >> 13) as u8;
                    if *prio != matched_prio {
                        return Err(drv(s, "Changing VLAN prio is not supported"));
                    }
                    if c.max_modify_header_actions == 0 {
                        return Err(drv(
                            src!("en/tc/act/pedit.c:mlx5e_tc_act_pedit_parse_action"),
                            "The pedit offload action is not supported",
                        ));
                    }
                    attr.action &= !VLAN_POP;
                    attr.action |= MOD_HDR;
                    attr.reg_writes += 1;
                } else {
                    let idx = attr.total_vlan;
                    if idx >= 2 {
                        return Err(drv(
                            src!("en/tc/act/vlan.c:parse_tc_vlan_action"),
                            "Total vlans used is greater than supported",
                        ));
                    }
                    if idx > 0 && c.vlan_actions_depth < 2 {
                        return Err(drv(
                            src!("en/tc/act/vlan.c:parse_tc_vlan_action"),
                            "vlan push action is not supported for vlan depth > 1",
                        ));
                    }
                    if idx == 0 && c.vlan_actions_depth < 1 && (*tpid != 0x8100 || *prio != 0) {
                        return Err(drv(
                            src!("en/tc/act/vlan.c:parse_tc_vlan_action"),
                            "vlan push action is not supported",
                        ));
                    }
                    attr.action |= VLAN_PUSH;
                    attr.total_vlan += 1;
                }
                attr.split_count = attr.out_count;
            }
            Act::VlanPop => {
                let idx = attr.total_vlan;
                if idx >= 2 {
                    return Err(drv(
                        src!("en/tc/act/vlan.c:parse_tc_vlan_action"),
                        "Total vlans used is greater than supported",
                    ));
                }
                if idx > 0 && c.vlan_actions_depth < 2 {
                    return Err(drv(
                        src!("en/tc/act/vlan.c:parse_tc_vlan_action"),
                        "vlan pop action is not supported",
                    ));
                }
                attr.action |= VLAN_POP;
                attr.total_vlan += 1;
                attr.split_count = attr.out_count;
            }
            Act::TunEncap(e) => st.encap = Some(e.clone()),
            Act::TunDecap => st.decap = true,
            Act::Ptype => st.ptype_host = true,
            Act::Mirred {
                port,
                ingress: true,
                last,
            } => {
                if !last {
                    // FLOW_ACTION_MIRRED_INGRESS has no FDB parser.
                    return Err(drv(
                        src!("en_tc.c:parse_tc_actions"),
                        "Not implemented offload action",
                    ));
                }
                let src_ = src!("en/tc/act/redirect_ingress.c:tc_act_can_offload_redirect_ingress");
                if !matches!(port.kind, PortKind::Internal) {
                    return Err(drv(
                        src_,
                        "redirect to ingress is supported only for OVS internal ports",
                    ));
                }
                if matches!(f.indev.kind, PortKind::Internal) {
                    return Err(drv(
                        src_,
                        "redirect to ingress is not supported from internal port",
                    ));
                }
                if !st.ptype_host {
                    return Err(drv(
                        src_,
                        "redirect to int port ingress requires ptype=host action",
                    ));
                }
                if attr.out_count > 0 {
                    return Err(drv(
                        src_,
                        "redirect to int port ingress is supported only as single destination",
                    ));
                }
                attr.action |= FWD;
                self.fwd_to_int_port(attr)?;
            }
            Act::Mirred {
                port,
                ingress: false,
                ..
            } => {
                if attr.out_count >= MAX_FWD {
                    return Err(drv(
                        src!("en/tc/act/mirred.c:tc_act_can_offload_mirred"),
                        "can't support more output ports, can't offload forwarding",
                    ));
                }
                let eswitch_port = matches!(port.kind, PortKind::Uplink | PortKind::Representor);
                let internal = matches!(port.kind, PortKind::Internal);
                if st.encap.is_none() && !eswitch_port && !internal {
                    if matches!(f.indev.kind, PortKind::Tunnel { .. } | PortKind::Internal) {
                        return Err(drv(
                            src!("en/tc/act/mirred.c:tc_act_can_offload_mirred"),
                            format!("tc_act_can_offload_mirred: {} is on no eSwitch and the filter is on another device than the representor: refused without a message (-EOPNOTSUPP)", port.name),
                        ));
                    }
                    return Err(drv(
                        src!("en/tc/act/mirred.c:tc_act_can_offload_mirred"),
                        "devices are not on same switch HW, can't offload forwarding",
                    ));
                }
                if let Some(mut e) = st.encap.take() {
                    if !matches!(port.kind, PortKind::Tunnel { .. }) {
                        e.tunnel = None;
                    }
                    attr.encaps.push(e);
                    attr.out_count += 1;
                } else if eswitch_port {
                    if st.ifindexes.contains(&port.no) {
                        return Err(drv(
                            src!("en/tc/act/mirred.c:is_duplicated_output_device"),
                            "can't duplicate output to same device",
                        ));
                    }
                    st.ifindexes.push(port.no);
                    // in_rep: the representor, or the uplink for an
                    // indirect block (tunnel device, internal port).
                    let in_uplink = !matches!(f.indev.kind, PortKind::Representor);
                    if in_uplink
                        && matches!(port.kind, PortKind::Uplink)
                        && !c.termination_table_raw_traffic
                    {
                        return Err(drv(
                            src!("en/tc/act/mirred.c:verify_uplink_forwarding"),
                            "devices are both uplink, can't offload forwarding",
                        ));
                    }
                    if matches!(f.indev.kind, PortKind::Representor) && f.indev.no == port.no {
                        return Err(drv(
                            src!("en/tc/act/mirred.c:parse_mirred"),
                            "can't forward from a VF to itself",
                        ));
                    }
                    attr.out_count += 1;
                } else {
                    // parse_mirred_ovs_master
                    self.fwd_to_int_port(attr)?;
                }
                attr.action |= FWD;
            }
            Act::Goto(dest) => {
                let backwards = c.chains_and_prios && c.ignore_flow_level;
                if !backwards && *dest <= f.chain {
                    return Err(drv(
                        src!("en/tc/act/goto.c:validate_goto_chain"),
                        "Goto lower numbered chain isn't supported",
                    ));
                }
                if *dest > self.max_chain() {
                    return Err(drv(
                        src!("en/tc/act/goto.c:validate_goto_chain"),
                        "Requested destination chain is out of supported range",
                    ));
                }
                if attr.action & DECAP != 0 && !c.reformat_and_fwd_to_table {
                    return Err(drv(
                        src!("en/tc/act/goto.c:validate_goto_chain"),
                        "Goto chain is not allowed if action has reformat or decap",
                    ));
                }
                attr.action |= FWD;
                attr.dest_chain = *dest;
            }
            Act::Drop => attr.action |= DROP,
        }
        Ok(())
    }

    /// `mlx5e_set_fwd_to_int_port_actions`.
    fn fwd_to_int_port(&self, attr: &mut Attr) -> Result<(), Refusal> {
        if !self.caps.int_port {
            return Err(drv(
                src!("en/tc/int_port.c:mlx5e_tc_int_port_get"),
                "mlx5e_tc_int_port_get: internal port offload not supported (no int_port_priv), -EOPNOTSUPP",
            ));
        }
        attr.reg_writes += 1;
        attr.action |= MOD_HDR;
        attr.dest_int_port = true;
        attr.split_count = attr.out_count;
        attr.dest_chain = 0;
        attr.out_count += 1;
        Ok(())
    }

    /// `mlx5e_tc_act_post_parse` for one attr.
    fn post_parse(
        &self,
        acts: &[Act],
        st: &mut ParseState,
        attr: &mut Attr,
    ) -> Result<(), Refusal> {
        for a in acts {
            match a {
                Act::Goto(_) if attr.dest_chain != 0 && st.decap => {
                    return Err(drv(
                        src!("en/tc/act/goto.c:tc_act_post_parse_goto"),
                        "Decap with goto isn't supported",
                    ));
                }
                Act::Ct { .. } if !st.ct && st.ct_clear => {
                    // mlx5_tc_ct_set_ct_clear_regs: ctstate, mark, labels,
                    // zone_restore.
                    attr.reg_writes += 4;
                    attr.action |= MOD_HDR;
                    st.ct_clear = false;
                    st.actions |= MOD_HDR;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `modify_header_match_supported`; true when a `-trk` match is added
    /// (`mlx5_tc_ct_add_no_trk_match`).
    fn modify_header_match_supported(
        &self,
        f: &TcFlower,
        acts: &[Act],
        ct_flow: bool,
        ct_clear: bool,
    ) -> Result<bool, Refusal> {
        let k = &f.key;
        let ip = k.eth_type.mask != 0 && matches!(k.eth_type.value, 0x0800 | 0x86dd);
        if !ip {
            return Ok(false);
        }
        let s = src!("en_tc.c:is_action_keys_supported");
        let mut ip_header = false;
        let mut tuple = false;
        for a in acts {
            let Act::Mangle(field) = a else { continue };
            use PeditField::*;
            match field {
                Ipv4Src | Ipv4Dst | Ipv4Tos | Ipv4Ttl => {
                    if *field != Ipv4Ttl {
                        ip_header = true;
                    }
                    if matches!(field, Ipv4Src | Ipv4Dst) {
                        tuple = true;
                    }
                    if ct_flow && tuple {
                        return Err(drv(
                            s,
                            "can't offload re-write of ipv4 address with action ct",
                        ));
                    }
                }
                Ipv6Src | Ipv6Dst | Ipv6Tclass | Ipv6Hlimit => {
                    if *field != Ipv6Hlimit {
                        ip_header = true;
                    }
                    if ct_flow && matches!(field, Ipv6Src | Ipv6Dst) {
                        tuple = true;
                    }
                    if ct_flow && tuple {
                        return Err(drv(
                            s,
                            "can't offload re-write of ipv6 address with action ct",
                        ));
                    }
                }
                TcpSport | TcpDport | UdpSport | UdpDport => {
                    tuple = true;
                    if ct_flow {
                        return Err(drv(
                            s,
                            "can't offload re-write of transport header ports with action ct",
                        ));
                    }
                }
                EthSrc | EthDst => {}
            }
        }
        let mut no_trk = false;
        if tuple && !ct_clear {
            // ct_flow was refused above.
            let (v, m) = mlx5_ctstate(f);
            if v & m == 1 << 2 {
                return Err(drv(
                    src!("en_tc.c:modify_tuple_supported"),
                    "can't offload tuple modification with ct matches and no ct(clear) action",
                ));
            }
            no_trk = true;
        }
        let proto = k.nw_proto.value & k.nw_proto.mask;
        if ip_header && !matches!(proto, 6 | 17 | 1) {
            return Err(drv(
                src!("en_tc.c:modify_header_match_supported"),
                "can't offload re-write of non TCP/UDP",
            ));
        }
        Ok(no_trk)
    }

    /// `mlx5e_attach_encap` up to the header's creation.
    fn check_encap(
        &self,
        e: &EncapKey,
        before: &[EncapKey],
        vxlan_ports: &mut Vec<(u16, bool)>,
    ) -> Result<(), Refusal> {
        let Some(tt) = e.tunnel else {
            return Err(drv(
                src!("en/tc_tun_encap.c:mlx5e_attach_encap"),
                "Unsupported tunnel",
            ));
        };
        if before.contains(e) {
            return Err(drv(
                src!("en/tc_tun_encap.c:is_duplicated_encap_entry"),
                "can't duplicate encap action",
            ));
        }
        if tt == TunnelType::Vxlan
            && e.tp_dst != VXLAN_PORT
            && !vxlan_ports.iter().any(|(p, _)| *p == e.tp_dst)
        {
            vxlan_ports.push((e.tp_dst, true));
        }
        let v6 = e.v6.1 != 0;
        let hlen = match tt {
            TunnelType::Vxlan => 16,
            TunnelType::Geneve => 16 + e.opts.iter().map(|o| 4 + o.2.len() as u32).sum::<u32>(),
        };
        let size = 14 + if v6 { 40 } else { 20 } + hlen;
        if size > self.caps.max_encap_header_size {
            return Err(drv(
                if v6 {
                    src!("en/tc_tun.c:mlx5e_tc_tun_create_header_ipv6")
                } else {
                    src!("en/tc_tun.c:mlx5e_tc_tun_create_header_ipv4")
                },
                format!(
                    "encap size {} too big, max supported is {}",
                    size, self.caps.max_encap_header_size
                ),
            ));
        }
        Ok(())
    }

    /// `mlx5e_tc_tun_parse` and the tunnel type's parsers.
    fn parse_tunnel(&self, f: &TcFlower, tt: TunnelType, p: &mut Parsed) -> Result<(), Refusal> {
        let c = &self.caps;
        let Some(t) = f.key.tunnel.as_ref() else {
            return Err(drv(
                src!("en/tc_tun.c:mlx5e_tc_tun_parse_udp_ports"),
                "UDP tunnel decap filter must include enc_dst_port condition",
            ));
        };
        if t.tp_dst.is_wild() {
            return Err(drv(
                src!("en/tc_tun.c:mlx5e_tc_tun_parse_udp_ports"),
                "UDP tunnel decap filter must include enc_dst_port condition",
            ));
        }
        if !t.tp_dst.is_exact() {
            return Err(drv(
                src!("en/tc_tun.c:mlx5e_tc_tun_parse_udp_ports"),
                "UDP tunnel decap filter must match enc_dst_port fully",
            ));
        }
        let port = t.tp_dst.value;
        match tt {
            TunnelType::Vxlan => {
                if port != VXLAN_PORT {
                    // Registered through udp_tunnel_nic when OVS opened the
                    // vxlan device; the table's room is a stage-3 matter.
                    p.vxlan_ports.push((port, false));
                }
                if !t.tun_id.is_wild() && !c.outer_vxlan_vni {
                    return Err(drv(
                        src!("en/tc_tun_vxlan.c:mlx5e_tc_tun_parse_vxlan"),
                        "Matching on VXLAN VNI is not supported",
                    ));
                }
            }
            TunnelType::Geneve => {
                let s = src!("en/tc_tun_geneve.c:mlx5e_tc_tun_parse_geneve_options");
                if port != GENEVE_PORT {
                    return Err(drv(
                        src!("en/tc_tun_geneve.c:mlx5e_tc_tun_check_udp_dport_geneve"),
                        "Matched UDP dst port is not registered as a GENEVE port",
                    ));
                }
                if !c.outer_geneve_oam {
                    return Err(drv(
                        src!("en/tc_tun_geneve.c:mlx5e_tc_tun_parse_geneve_params"),
                        "Matching on GENEVE OAM is not supported",
                    ));
                }
                if !t.tun_id.is_wild() && !c.outer_geneve_vni {
                    return Err(drv(
                        src!("en/tc_tun_geneve.c:mlx5e_tc_tun_parse_geneve_vni"),
                        "Matching on GENEVE VNI is not supported",
                    ));
                }
                if !t.geneve_opts.is_empty() {
                    let any_data = t.geneve_opts.iter().any(|o| o.mask.iter().any(|b| *b != 0));
                    if any_data && !c.geneve_tlv_option_0_data {
                        return Err(drv(s, "Matching on GENEVE options is not supported"));
                    }
                    if !c.outer_geneve_opt_len {
                        return Err(drv(s, "Matching on GENEVE options len is not supported"));
                    }
                    let words: u32 = t
                        .geneve_opts
                        .iter()
                        .map(|o| 1 + o.value.len() as u32 / 4)
                        .sum();
                    let max = (c.max_geneve_tlv_option_data_len as u32 + 1)
                        * c.max_geneve_tlv_options as u32;
                    if words > max {
                        return Err(drv(
                            s,
                            "Matching on GENEVE options: unsupported options len",
                        ));
                    }
                    // Only the first option is programmed.
                    let o = &t.geneve_opts[0];
                    if o.mask.iter().any(|b| *b != 0) {
                        if o.value.len() / 4 > c.max_geneve_tlv_option_data_len as usize {
                            return Err(drv(
                                s,
                                "Matching on GENEVE options: unsupported option len",
                            ));
                        }
                        if o.value.iter().all(|b| *b == 0) {
                            return Err(drv(
                                s,
                                "Matching on GENEVE options: can't match on 0 data field",
                            ));
                        }
                        p.geneve_opt = Some((o.class, o.typ));
                    }
                }
            }
        }
        if !t.ttl.is_wild() && !c.outer_ipv4_ttl {
            return Err(drv(
                src!("en/tc_tun.c:mlx5e_tc_tun_parse"),
                "Matching on TTL is not supported",
            ));
        }
        Ok(())
    }

    /// `mlx5e_tc_verify_tunnel_ecn`.
    fn verify_tunnel_ecn(&self, f: &TcFlower) -> Result<(), Refusal> {
        let s = src!("en_tc.c:mlx5e_tc_verify_tunnel_ecn");
        let (ok, om) = f
            .key
            .tunnel
            .as_ref()
            .map(|t| (t.tos.value & 3, t.tos.mask & 3))
            .unwrap_or((0, 0));
        let (ik, im) = (f.key.nw_tos.value & 3, f.key.nw_tos.mask & 3);
        if om != 0 && om != 3 {
            return Err(drv(s, "Partial match on enc_tos ecn bits isn't supported"));
        }
        if om == 0 {
            if im == 0 {
                return Ok(());
            }
            return Err(drv(
                s,
                "Matching on tos ecn bits without also matching enc_tos ecn bits isn't supported",
            ));
        }
        if im != 0 && im != 3 {
            return Err(drv(
                s,
                "Partial match on tos ecn bits with match on enc_tos ecn bits isn't supported",
            ));
        }
        if im == 0 {
            return Ok(());
        }
        if ok == 1 {
            return Err(drv(s, "Match on enc_tos ecn = ECT(1) isn't supported"));
        }
        if ok == 3 && ik != 3 {
            return Err(drv(
                s,
                "Match on tos enc_tos ecn = CE while match on tos ecn != CE isn't supported",
            ));
        }
        Ok(())
    }

    /// The match criteria (masks and criteria-enable bits) the driver
    /// writes: rules with equal criteria share a flow group.
    fn mask_key(&self, f: &TcFlower, no_trk: bool) -> String {
        let k = &f.key;
        let vlan: Vec<(bool, u16)> = k
            .vlans
            .iter()
            .map(|v| (v.tpid == 0x88a8, v.tci.mask))
            .collect();
        let implicit_untagged = vlan.is_empty() && k.eth_type.mask != 0;
        let (mut cts_v, mut cts_m) = mlx5_ctstate(f);
        if no_trk {
            cts_m |= 1 << 2;
            cts_v &= !(1 << 2);
        }
        let _ = cts_v;
        let tun = k.tunnel.as_ref().map(|t| {
            (
                (t.tun_id.mask, t.ipv4_src.mask, t.ipv4_dst.mask),
                (t.ipv6_src.mask, t.ipv6_dst.mask, t.tos.mask, t.ttl.mask),
                (t.tp_src.mask, t.tp_dst.mask),
                t.geneve_opts.first().map(|o| o.mask.clone()),
                f.chain != 0,
            )
        });
        format!(
            "{:?}",
            (
                (
                    k.eth_type.mask,
                    implicit_untagged,
                    vlan,
                    k.eth_src.mask,
                    k.eth_dst.mask
                ),
                (
                    k.ipv4_src.mask,
                    k.ipv4_dst.mask,
                    k.ipv6_src.mask,
                    k.ipv6_dst.mask
                ),
                (
                    k.nw_proto.mask,
                    k.nw_tos.mask,
                    k.nw_ttl.mask,
                    k.nw_frag.mask & 1
                ),
                (k.tp_src.mask, k.tp_dst.mask, k.tcp_flags.mask),
                (
                    k.ct_zone.mask != 0,
                    cts_m,
                    k.ct_mark.mask,
                    k.ct_label.mask != 0
                ),
                tun,
            )
        )
    }
}

fn tunnel_name(t: TunnelType) -> &'static str {
    match t {
        TunnelType::Vxlan => "vxlan",
        TunnelType::Geneve => "geneve",
    }
}

/// `struct mlx5e_tc_act_parse_state`, the parts modelled.
#[derive(Default)]
struct ParseState {
    actions: u32,
    ct: bool,
    ct_clear: bool,
    encap: Option<EncapKey>,
    decap: bool,
    ptype_host: bool,
    ifindexes: Vec<u32>,
}

impl Driver for Mlx5 {
    fn name(&self) -> &'static str {
        "mlx5_core"
    }
    fn check(&self, f: &TcFlower) -> Result<(), Refusal> {
        self.parse(f).map(|_| ())
    }
    fn reserve(&mut self, f: &TcFlower) -> Result<(), Refusal> {
        let p = self.parse(f)?;
        self.state.reserve(&self.caps, f, p)
    }
    fn release(&mut self, f: &TcFlower) {
        self.state.release(f);
    }
    fn account_ct(&mut self, n: u64) -> u64 {
        self.state.account_ct(&self.caps, n)
    }
    fn resources(&self) -> BTreeMap<String, Resource> {
        self.state.resources(&self.caps)
    }
}
