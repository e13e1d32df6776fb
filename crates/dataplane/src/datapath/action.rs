//! Datapath actions: the flat, decision-free list the fast path replays.
//!
//! The slow path's translation (`ofproto::xlate`) turns a walk through the
//! OpenFlow tables into one of these lists. Nothing here looks anything up or
//! branches on packet contents beyond "is this header present": that is what
//! makes a datapath flow cacheable and, later, offloadable to XDP.

use std::fmt;

/// Why the datapath dropped a packet on purpose (parse errors are counted
/// separately, per parse error).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// `dec_ttl` on a packet whose TTL / hop limit was 0 or 1.
    TtlExceeded,
    /// The translation hit the resubmit depth limit.
    RecursionLimit,
    /// A packet recirculated more than [`super::MAX_RECIRC`] times.
    RecircLimit,
    /// A meter's `drop` band fired.
    Meter,
}

impl DropReason {
    pub const ALL: &'static [DropReason] = &[
        DropReason::TtlExceeded,
        DropReason::RecursionLimit,
        DropReason::RecircLimit,
        DropReason::Meter,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DropReason::TtlExceeded => "ttl_exceeded",
            DropReason::RecursionLimit => "recursion_limit",
            DropReason::RecircLimit => "recirc_limit",
            DropReason::Meter => "meter",
        }
    }
}

/// What a `controller(...)` action with options adds to its copy, for
/// `NXT_PACKET_IN2`: the action's userdata, the meter its copies go
/// through, and the pipeline fields (registers, `metadata`, tunnel
/// fields) as the translation had them when it reached the action.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ControllerExtra {
    pub userdata: Vec<u8>,
    /// Copies over this meter's rate are not sent (OVS's
    /// `controller(meter_id=N)`).
    pub meter_id: Option<u32>,
    pub pipeline: nicflow_flow::FlowKey,
    /// `controller(...,pause)`: what the walk still had to do when it
    /// stopped, for the controller's `NXT_RESUME`.
    pub paused: Option<Paused>,
}

/// A walk frozen by `controller(pause)` (OVS's `frozen_state` of a
/// continuation): the remaining actions of every action list that was
/// running, innermost first, each with the table and cookie of the rule
/// it belongs to (what a later `PACKET_IN` or relative `resubmit` of that
/// list needs), and the `push:`/`pop:` stack. The pipeline fields are not
/// here: the `PACKET_IN2`'s metadata carries them and `NXT_RESUME` brings
/// them back. Nothing of it stays in the switch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Paused {
    pub frames: Vec<PausedFrame>,
    /// Bottom first.
    pub stack: Vec<u128>,
}

/// One action list's remainder in a [`Paused`] walk.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PausedFrame {
    pub table_id: u8,
    pub cookie: u64,
    pub actions: Vec<nicflow_flow::Action>,
}

/// One datapath action.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DpAction {
    /// Transmit a copy on this port (by number).
    Output(u32),
    SetEthSrc([u8; 6]),
    SetEthDst([u8; 6]),
    SetIpv4Src(u32),
    SetIpv4Dst(u32),
    SetIpv6Src([u8; 16]),
    SetIpv6Dst([u8; 16]),
    SetArpSpa(u32),
    SetArpTpa(u32),
    SetArpSha([u8; 6]),
    SetArpTha([u8; 6]),
    /// The ARP opcode (`set_field:N->arp_op`).
    SetArpOp(u8),
    /// The target address of an IPv6 neighbor solicitation/advertisement
    /// (`set_field:..->nd_target`), ICMPv6 checksum patched.
    SetNdTarget([u8; 16]),
    /// The MAC of the frame's 8-byte source link-layer address option
    /// (`nd_sll`); a frame without one is left alone, as OVS's
    /// `packet_set_nd` (no option is added).
    SetNdSll([u8; 6]),
    /// The same for the target link-layer address option (`nd_tll`).
    SetNdTll([u8; 6]),
    /// The whole TOS / traffic-class byte.
    SetTos(u8),
    SetTtl(u8),
    SetTpSrc(u16),
    SetTpDst(u16),
    /// Push a new outermost tag.
    PushVlan {
        tpid: u16,
        tci: u16,
    },
    /// Remove the outermost tag.
    PopVlan,
    /// Rewrite VID and PCP of the outermost tag (the tag must be there; the
    /// translation only emits this when the flow's mask guarantees it).
    SetVlanTci(u16),
    /// Run the packet through the bridge's meter N: it may be dropped
    /// (and the actions after this do not run) or remarked.
    Meter(u32),
    /// Queue a copy for the controller: at most `max_len` bytes (0: all),
    /// with what a `PACKET_IN` says about it (`OFPR_*` reason, the table
    /// and cookie of the rule that sent it).
    Controller {
        max_len: u16,
        reason: u8,
        table_id: u8,
        cookie: u64,
        /// `controller(userdata=..,meter_id=..)`: what the copy carries
        /// beyond a plain `PACKET_IN` (boxed: plain copies stay small).
        extra: Option<Box<ControllerExtra>>,
    },
    /// Count a deliberate drop. Actions before it still happened.
    Drop(DropReason),
    /// Give the frame this tunnel ID (VNI) for a later output to a tunnel
    /// port whose key comes from the flow (`key=flow`); ports with a fixed
    /// key and non-tunnel ports ignore it.
    SetTunnelId(u64),
    /// Give the frame `tun_metadata<slot>` = `value` (and mark it present),
    /// for a later output to a Geneve port whose TLV map sends that slot as
    /// an option.
    SetTunnelMetadata {
        slot: u8,
        value: u32,
    },
    /// Run the packet through the bridge's connection tracker in `zone`;
    /// its verdict (ct_state, mark, label, tuple) stays with the packet
    /// for a later [`DpAction::Recirc`]. `commit` stores the connection,
    /// with `mark`/`label` (value, mask) written into it.
    Ct {
        zone: u16,
        commit: bool,
        force: bool,
        mark: Option<(u32, u32)>,
        label: Option<(u128, u128)>,
        /// `nat`/`nat(src|dst=..)`: the tracker says what to rewrite and
        /// the executor writes it.
        nat: Option<nicflow_conntrack::NatAction>,
    },
    /// Look a copy of the packet up again with `recirc_id` = this id and
    /// its connection-tracking verdict in the key, then go on with the
    /// next action (OVS's recirculation after `ct(table=N)`).
    Recirc(u32),
    /// Forget the packet's connection-tracking verdict.
    CtClear,
    /// A select group that chooses per packet (`selection_method=rr`,
    /// `wrr`, `splb`): run one of `buckets` — each a complete action list
    /// that leaves the packet as it found it — chosen by `method` with
    /// state kept per `group` by the executor, then go on with the next
    /// action. Only live buckets of non-zero weight are here.
    Select {
        group: u32,
        method: SelectMethod,
        buckets: Vec<SelectBucket>,
    },
}

/// How a [`DpAction::Select`] chooses its bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelectMethod {
    /// The buckets in turn.
    RoundRobin,
    /// Smooth weighted round robin (nginx's) over the buckets' weights.
    Weighted,
    /// Smooth weighted round robin over the weights the daemon publishes
    /// from the measured congestion of each bucket's path (the buckets'
    /// own weights until it has).
    Splb,
}

impl SelectMethod {
    pub fn name(self) -> &'static str {
        match self {
            SelectMethod::RoundRobin => "rr",
            SelectMethod::Weighted => "wrr",
            SelectMethod::Splb => "splb",
        }
    }
}

/// One bucket of a [`DpAction::Select`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SelectBucket {
    /// The bucket's position in the group (what splb weights are
    /// published by).
    pub index: u16,
    pub weight: u16,
    pub actions: Vec<DpAction>,
}

fn mac(f: &mut fmt::Formatter<'_>, m: &[u8; 6]) -> fmt::Result {
    write!(
        f,
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

impl fmt::Display for DpAction {
    /// The `ovs-dpctl dump-flows` style, so operators read familiar text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use std::net::{Ipv4Addr, Ipv6Addr};
        match self {
            DpAction::Output(p) => write!(f, "{p}"),
            DpAction::SetEthSrc(m) => {
                f.write_str("set(eth(src=")?;
                mac(f, m)?;
                f.write_str("))")
            }
            DpAction::SetEthDst(m) => {
                f.write_str("set(eth(dst=")?;
                mac(f, m)?;
                f.write_str("))")
            }
            DpAction::SetIpv4Src(a) => write!(f, "set(ipv4(src={}))", Ipv4Addr::from(*a)),
            DpAction::SetIpv4Dst(a) => write!(f, "set(ipv4(dst={}))", Ipv4Addr::from(*a)),
            DpAction::SetIpv6Src(a) => write!(f, "set(ipv6(src={}))", Ipv6Addr::from(*a)),
            DpAction::SetIpv6Dst(a) => write!(f, "set(ipv6(dst={}))", Ipv6Addr::from(*a)),
            DpAction::SetArpSpa(a) => write!(f, "set(arp(sip={}))", Ipv4Addr::from(*a)),
            DpAction::SetArpTpa(a) => write!(f, "set(arp(tip={}))", Ipv4Addr::from(*a)),
            DpAction::SetArpSha(m) => {
                f.write_str("set(arp(sha=")?;
                mac(f, m)?;
                f.write_str("))")
            }
            DpAction::SetArpTha(m) => {
                f.write_str("set(arp(tha=")?;
                mac(f, m)?;
                f.write_str("))")
            }
            DpAction::SetArpOp(op) => write!(f, "set(arp(op={op}))"),
            DpAction::SetNdTarget(a) => write!(f, "set(nd(target={}))", Ipv6Addr::from(*a)),
            DpAction::SetNdSll(m) => {
                f.write_str("set(nd(sll=")?;
                mac(f, m)?;
                f.write_str("))")
            }
            DpAction::SetNdTll(m) => {
                f.write_str("set(nd(tll=")?;
                mac(f, m)?;
                f.write_str("))")
            }
            DpAction::SetTos(t) => write!(f, "set(ip(tos={t:#x}))"),
            DpAction::SetTtl(t) => write!(f, "set(ip(ttl={t}))"),
            DpAction::SetTpSrc(p) => write!(f, "set(l4(src={p}))"),
            DpAction::SetTpDst(p) => write!(f, "set(l4(dst={p}))"),
            DpAction::PushVlan { tpid, tci } => write!(
                f,
                "push_vlan(tpid={tpid:#x},vid={},pcp={})",
                tci & 0xfff,
                tci >> 13
            ),
            DpAction::PopVlan => f.write_str("pop_vlan"),
            DpAction::SetVlanTci(tci) => {
                write!(f, "set(vlan(vid={},pcp={}))", tci & 0xfff, tci >> 13)
            }
            DpAction::Controller {
                max_len,
                reason,
                table_id,
                cookie,
                ..
            } => write!(
                f,
                "userspace(controller,reason={reason},table={table_id},cookie={cookie:#x},max_len={max_len})"
            ),
            DpAction::Drop(r) => write!(f, "drop({})", r.name()),
            DpAction::Meter(id) => write!(f, "meter({id})"),
            DpAction::SetTunnelId(id) => write!(f, "set(tunnel(tun_id={id:#x}))"),
            DpAction::SetTunnelMetadata { slot, value } => {
                write!(f, "set(tunnel(tun_metadata{slot}={value:#x}))")
            }
            DpAction::Ct {
                zone,
                commit,
                force,
                mark,
                label,
                nat,
            } => {
                // `ovs-dpctl`'s order: commit, zone, mark, labels, nat.
                let mut parts = Vec::new();
                if *commit {
                    parts.push(if *force { "force_commit" } else { "commit" }.to_string());
                }
                if *zone != 0 {
                    parts.push(format!("zone={zone}"));
                }
                if let Some((v, m)) = mark {
                    parts.push(format!("mark={v:#x}/{m:#x}"));
                }
                if let Some((v, m)) = label {
                    parts.push(format!("label={v:#x}/{m:#x}"));
                }
                if let Some(n) = nat {
                    parts.push(format_dp_nat(n));
                }
                if parts.is_empty() {
                    f.write_str("ct")
                } else {
                    write!(f, "ct({})", parts.join(","))
                }
            }
            DpAction::Recirc(id) => write!(f, "recirc({id:#x})"),
            DpAction::CtClear => f.write_str("ct_clear"),
            DpAction::Select {
                group,
                method,
                buckets,
            } => {
                write!(f, "select({},g={group}", method.name())?;
                for b in buckets {
                    f.write_str(",")?;
                    if *method != SelectMethod::RoundRobin {
                        write!(f, "{}:", b.weight)?;
                    }
                    write!(f, "[{}]", format_actions(&b.actions))?;
                }
                f.write_str(")")
            }
        }
    }
}

/// `nat`, `nat(src=A-B:P-Q)`: the datapath's view of a `ct` NAT.
fn format_dp_nat(n: &nicflow_conntrack::NatAction) -> String {
    let Some(kind) = n.kind else {
        return "nat".into();
    };
    let mut s = match kind {
        nicflow_conntrack::NatKind::Src => "nat(src".to_string(),
        nicflow_conntrack::NatKind::Dst => "nat(dst".to_string(),
    };
    if let Some(a) = n.addr_min {
        s.push_str(&format!("={a}"));
        if let Some(b) = n.addr_max.filter(|b| *b != a) {
            s.push_str(&format!("-{b}"));
        }
    }
    if n.port_min != 0 {
        s.push_str(&format!(":{}", n.port_min));
        if n.port_max > n.port_min {
            s.push_str(&format!("-{}", n.port_max));
        }
    }
    s.push(')');
    s
}

/// Every action of `actions`, those inside a [`DpAction::Select`]'s
/// buckets included (depth first), for questions about a whole list such
/// as "which recirculation ids does it use".
pub fn walk<'a>(actions: &'a [DpAction], f: &mut impl FnMut(&'a DpAction)) {
    for a in actions {
        f(a);
        if let DpAction::Select { buckets, .. } = a {
            for b in buckets {
                walk(&b.actions, f);
            }
        }
    }
}

/// Print an action list; an empty one is `drop`.
pub fn format_actions(actions: &[DpAction]) -> String {
    if actions.is_empty() {
        return "drop".to_string();
    }
    actions
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",")
}
