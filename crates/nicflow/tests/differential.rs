//! Differential test of the fast path against the slow path.
//!
//! Invariant protected: the datapath caches (EMC, megaflow cache) are a pure
//! optimisation. The same packets, injected in the same batches, through a
//! bridge with its caches on and through an identically built bridge with
//! `caches_enabled: false` (every packet translated by `ofproto::xlate`)
//! must give byte-identical output on every port, in the same order, the
//! same controller queue and the same drop counters — also when rules are
//! added and deleted in the middle of the stream (revalidation) and when
//! `normal` learns and moves MAC addresses.
//!
//! Rule sets are generated as ovs-ofctl text, so the rule parser is
//! exercised on the way in; packets come from small value pools so that
//! they actually hit the rules and each other's cached flows.

use nicflow::bridge::Bridge;
use nicflow::datapath::DatapathConfig;
use nicflow::port::mem::{MemHandle, MemPort};
use nicflow_packet::builder::FrameBuilder;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

// ---------------------------------------------------------------------------
// Value pools
// ---------------------------------------------------------------------------

const N_PORTS: usize = 4;
const MACS: [[u8; 6]; 4] = [
    [0x02, 0, 0, 0, 0, 0x01],
    [0x02, 0, 0, 0, 0, 0x02],
    [0x02, 0, 0, 0, 0, 0x03],
    [0xff; 6],
];
const IP4: [Ipv4Addr; 4] = [
    Ipv4Addr::new(198, 18, 0, 1),
    Ipv4Addr::new(198, 18, 0, 2),
    Ipv4Addr::new(198, 18, 1, 1),
    Ipv4Addr::new(198, 19, 0, 1),
];
const IP4_PREFIX: [u8; 4] = [32, 24, 16, 15];
const IP6: [Ipv6Addr; 2] = [
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
    Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2),
];
const IP6_PREFIX: [u8; 3] = [128, 48, 32];
const L4_PORTS: [u16; 4] = [53, 80, 1000, 5000];
const L4_MASKS: [u16; 3] = [0xffff, 0xfff0, 0xff00];
const TTLS: [u8; 4] = [0, 1, 2, 64];
/// TOS bytes: DSCP 0, DSCP 8, DSCP 8 + ECN 1, DSCP 46 (EF).
const TOS: [u8; 4] = [0x00, 0x20, 0x21, 0xb8];
/// TOS values a rule may write (`mod_nw_tos` needs the ECN bits clear).
const SET_TOS: [u8; 3] = [0x00, 0x20, 0xb8];
/// Rewrite values outside the packet pools: a rule may write a value some
/// packets already carry (the pools) or one none does (these).
const SET_MACS_OTHER: [[u8; 6]; 2] = [[0x02, 0, 0, 0, 0, 0xa1], [0x02, 0, 0, 0, 0, 0xa2]];
const SET_IP4_OTHER: [Ipv4Addr; 2] = [Ipv4Addr::new(198, 18, 9, 1), Ipv4Addr::new(198, 18, 9, 2)];
const SET_L4_OTHER: [u16; 2] = [8080, 9999];
const SET_TOS_OTHER: [u8; 2] = [0x48, 0x88];
const SET_VIDS_OTHER: [u16; 2] = [30, 40];
const VIDS: [u16; 2] = [10, 20];
const TCP_FLAGS: [u16; 5] = [0x002, 0x012, 0x010, 0x011, 0x004];
const TCP_FLAG_MATCHES: [&str; 7] = [
    "+syn", "+syn+ack", "+ack", "-ack", "+fin", "+rst", "+syn-ack",
];
/// Lengths malformed frames are cut to.
const TRUNC: [usize; 4] = [10, 20, 30, 45];

fn mac_text(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

// ---------------------------------------------------------------------------
// Rules
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Any,
    Ip,
    Ipv6,
    Arp,
    Tcp,
    Udp,
    Icmp,
    Tcp6,
    Udp6,
    Icmp6,
}

impl Proto {
    fn name(self) -> Option<&'static str> {
        Some(match self {
            Proto::Any => return None,
            Proto::Ip => "ip",
            Proto::Ipv6 => "ipv6",
            Proto::Arp => "arp",
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Icmp => "icmp",
            Proto::Tcp6 => "tcp6",
            Proto::Udp6 => "udp6",
            Proto::Icmp6 => "icmp6",
        })
    }
    fn ipv4(self) -> bool {
        matches!(self, Proto::Ip | Proto::Tcp | Proto::Udp | Proto::Icmp)
    }
    fn ipv6(self) -> bool {
        matches!(self, Proto::Ipv6 | Proto::Tcp6 | Proto::Udp6 | Proto::Icmp6)
    }
    fn ip(self) -> bool {
        self.ipv4() || self.ipv6()
    }
    fn ports(self) -> bool {
        matches!(self, Proto::Tcp | Proto::Udp | Proto::Tcp6 | Proto::Udp6)
    }
    fn tcp(self) -> bool {
        matches!(self, Proto::Tcp | Proto::Tcp6)
    }
}

fn proto() -> impl Strategy<Value = Proto> {
    prop_oneof![
        6 => Just(Proto::Any),
        2 => Just(Proto::Ip),
        1 => Just(Proto::Ipv6),
        1 => Just(Proto::Arp),
        2 => Just(Proto::Tcp),
        2 => Just(Proto::Udp),
        1 => Just(Proto::Icmp),
        1 => Just(Proto::Tcp6),
        1 => Just(Proto::Udp6),
        1 => Just(Proto::Icmp6),
    ]
}

/// One `field=value` piece of a match.
#[derive(Clone, Debug)]
enum Mp {
    InPort(u8),
    DlSrc(u8),
    /// `dl_src=MAC/ff:ff:ff:ff:ff:fe`
    DlSrcMasked(u8),
    DlDst(u8),
    /// `dl_dst=01:00:00:00:00:00/01:00:00:00:00:00` (group bit)
    DlDstMulticast,
    /// VID 10, VID 20, or `0xffff` (untagged)
    Vlan(u8),
    VlanPcp(u8),
    NwSrc(u8, u8),
    NwDst(u8, u8),
    Ip6Src(u8, u8),
    Ip6Dst(u8, u8),
    TpSrc(u8, u8),
    TpDst(u8, u8),
    Ttl(u8),
    Dscp(u8),
    TcpFlags(u8),
    IcmpType(bool),
    ArpOp(bool),
    Reg0(u8),
    IpFrag(u8),
}

const IP_FRAGS: [&str; 5] = ["no", "yes", "first", "later", "not_later"];

impl Mp {
    /// Pieces of the same kind touch the same bits; a rule keeps one.
    fn kind(&self) -> u8 {
        match self {
            Mp::InPort(_) => 0,
            Mp::DlSrc(_) | Mp::DlSrcMasked(_) => 1,
            Mp::DlDst(_) | Mp::DlDstMulticast => 2,
            Mp::Vlan(_) | Mp::VlanPcp(_) => 3,
            Mp::NwSrc(..) => 4,
            Mp::NwDst(..) => 5,
            Mp::Ip6Src(..) => 6,
            Mp::Ip6Dst(..) => 7,
            Mp::TpSrc(..) => 8,
            Mp::TpDst(..) => 9,
            Mp::Ttl(_) => 10,
            Mp::Dscp(_) => 11,
            Mp::TcpFlags(_) => 12,
            Mp::IcmpType(_) => 13,
            Mp::ArpOp(_) => 14,
            Mp::Reg0(_) => 15,
            Mp::IpFrag(_) => 16,
        }
    }

    /// Does the protocol part of the match establish this piece's
    /// prerequisite?
    fn fits(&self, p: Proto) -> bool {
        match self {
            Mp::NwSrc(..) | Mp::NwDst(..) => p.ipv4() || p == Proto::Arp,
            Mp::Ip6Src(..) | Mp::Ip6Dst(..) => p.ipv6(),
            Mp::TpSrc(..) | Mp::TpDst(..) => p.ports(),
            Mp::Ttl(_) | Mp::Dscp(_) | Mp::IpFrag(_) => p.ip(),
            Mp::TcpFlags(_) => p.tcp(),
            Mp::IcmpType(_) => p == Proto::Icmp,
            Mp::ArpOp(_) => p == Proto::Arp,
            _ => true,
        }
    }

    fn render(&self) -> String {
        let ip4 = |i: u8, p: u8| {
            let len = IP4_PREFIX[p as usize];
            if len == 32 {
                IP4[i as usize].to_string()
            } else {
                format!("{}/{len}", IP4[i as usize])
            }
        };
        let ip6 = |i: u8, p: u8| {
            let len = IP6_PREFIX[p as usize];
            if len == 128 {
                IP6[i as usize].to_string()
            } else {
                format!("{}/{len}", IP6[i as usize])
            }
        };
        let tp = |i: u8, m: u8| {
            let (v, m) = (L4_PORTS[i as usize], L4_MASKS[m as usize]);
            if m == 0xffff {
                v.to_string()
            } else {
                format!("{:#x}/{m:#x}", v & m)
            }
        };
        match self {
            Mp::InPort(i) => format!("in_port=p{}", i + 1),
            Mp::DlSrc(i) => format!("dl_src={}", mac_text(&MACS[*i as usize])),
            Mp::DlSrcMasked(i) => {
                format!("dl_src={}/ff:ff:ff:ff:ff:fe", mac_text(&MACS[*i as usize]))
            }
            Mp::DlDst(i) => format!("dl_dst={}", mac_text(&MACS[*i as usize])),
            Mp::DlDstMulticast => "dl_dst=01:00:00:00:00:00/01:00:00:00:00:00".into(),
            Mp::Vlan(0) => format!("dl_vlan={}", VIDS[0]),
            Mp::Vlan(1) => format!("dl_vlan={}", VIDS[1]),
            Mp::Vlan(_) => "dl_vlan=0xffff".into(),
            Mp::VlanPcp(p) => format!("dl_vlan_pcp={p}"),
            Mp::NwSrc(i, p) => format!("nw_src={}", ip4(*i, *p)),
            Mp::NwDst(i, p) => format!("nw_dst={}", ip4(*i, *p)),
            Mp::Ip6Src(i, p) => format!("ipv6_src={}", ip6(*i, *p)),
            Mp::Ip6Dst(i, p) => format!("ipv6_dst={}", ip6(*i, *p)),
            Mp::TpSrc(i, m) => format!("tp_src={}", tp(*i, *m)),
            Mp::TpDst(i, m) => format!("tp_dst={}", tp(*i, *m)),
            Mp::Ttl(i) => format!("nw_ttl={}", TTLS[*i as usize]),
            Mp::Dscp(i) => format!("ip_dscp={}", TOS[*i as usize] >> 2),
            Mp::TcpFlags(i) => format!("tcp_flags={}", TCP_FLAG_MATCHES[*i as usize]),
            Mp::IcmpType(reply) => format!("icmp_type={}", if *reply { 0 } else { 8 }),
            Mp::ArpOp(reply) => format!("arp_op={}", if *reply { 2 } else { 1 }),
            Mp::Reg0(v) => format!("reg0={v}"),
            Mp::IpFrag(f) => format!("ip_frag={}", IP_FRAGS[*f as usize]),
        }
    }
}

fn match_piece() -> impl Strategy<Value = Mp> {
    prop_oneof![
        3 => (0u8..4).prop_map(Mp::InPort),
        2 => (0u8..4).prop_map(Mp::DlSrc),
        1 => (0u8..4).prop_map(Mp::DlSrcMasked),
        2 => (0u8..4).prop_map(Mp::DlDst),
        1 => Just(Mp::DlDstMulticast),
        2 => (0u8..3).prop_map(Mp::Vlan),
        1 => prop_oneof![Just(0u8), Just(3u8)].prop_map(Mp::VlanPcp),
        2 => (0u8..4, 0u8..4).prop_map(|(a, p)| Mp::NwSrc(a, p)),
        2 => (0u8..4, 0u8..4).prop_map(|(a, p)| Mp::NwDst(a, p)),
        1 => (0u8..2, 0u8..3).prop_map(|(a, p)| Mp::Ip6Src(a, p)),
        1 => (0u8..2, 0u8..3).prop_map(|(a, p)| Mp::Ip6Dst(a, p)),
        2 => (0u8..4, 0u8..3).prop_map(|(a, m)| Mp::TpSrc(a, m)),
        2 => (0u8..4, 0u8..3).prop_map(|(a, m)| Mp::TpDst(a, m)),
        1 => (0u8..4).prop_map(Mp::Ttl),
        1 => (0u8..4).prop_map(Mp::Dscp),
        1 => (0u8..7).prop_map(Mp::TcpFlags),
        1 => any::<bool>().prop_map(Mp::IcmpType),
        1 => any::<bool>().prop_map(Mp::ArpOp),
        1 => (1u8..3).prop_map(Mp::Reg0),
        1 => (0u8..5).prop_map(Mp::IpFrag),
    ]
}

/// One action.
#[derive(Clone, Debug)]
enum Ap {
    Output(u8),
    Normal,
    Flood,
    InPort,
    ModDlSrc(u8),
    ModDlDst(u8),
    ModNwSrc(u8),
    ModNwDst(u8),
    ModTpSrc(u8),
    ModTpDst(u8),
    ModNwTos(u8),
    DecTtl,
    ModVlanVid(u8),
    ModVlanPcp(u8),
    PushVlan,
    StripVlan,
    SetReg0(u8),
    /// `resubmit(,T)`, T a later table.
    Resubmit(u8),
    /// `controller` or `controller:64`.
    Controller(bool),
}

impl Ap {
    fn fits(&self, p: Proto) -> bool {
        match self {
            Ap::ModNwSrc(_) | Ap::ModNwDst(_) => p.ipv4(),
            Ap::ModTpSrc(_) | Ap::ModTpDst(_) => p.ports(),
            Ap::ModNwTos(_) => p.ip(),
            _ => true,
        }
    }

    /// Rendered text; `None` when the action cannot appear in this table
    /// (a resubmit from the last table).
    fn render(&self, table: u8, sloppy: bool) -> Option<String> {
        let i = |i: &u8| *i as usize;
        // Indices past a pool pick from its `*_OTHER` list.
        fn pick<T: Copy>(pool: &[T], other: &[T], i: usize) -> T {
            pool.get(i)
                .copied()
                .unwrap_or_else(|| other[(i - pool.len()) % other.len()])
        }
        Some(match self {
            Ap::Output(p) => format!("output:p{}", p + 1),
            Ap::Normal => "normal".into(),
            Ap::Flood => "flood".into(),
            Ap::InPort => "in_port".into(),
            Ap::ModDlSrc(m) | Ap::ModDlDst(m) => {
                let name = if matches!(self, Ap::ModDlSrc(_)) {
                    "mod_dl_src"
                } else {
                    "mod_dl_dst"
                };
                let mac = pick(&MACS, &SET_MACS_OTHER, i(m));
                format!("{name}:{}", mac_text(&mac))
            }
            Ap::ModNwSrc(a) | Ap::ModNwDst(a) => {
                let name = if matches!(self, Ap::ModNwSrc(_)) {
                    "mod_nw_src"
                } else {
                    "mod_nw_dst"
                };
                let ip = pick(&IP4, &SET_IP4_OTHER, i(a));
                format!("{name}:{ip}")
            }
            Ap::ModTpSrc(p) | Ap::ModTpDst(p) => {
                let name = if matches!(self, Ap::ModTpSrc(_)) {
                    "mod_tp_src"
                } else {
                    "mod_tp_dst"
                };
                let port = pick(&L4_PORTS, &SET_L4_OTHER, i(p));
                format!("{name}:{port}")
            }
            Ap::ModNwTos(t) => {
                let tos = pick(&SET_TOS, &SET_TOS_OTHER, i(t));
                format!("mod_nw_tos:{tos}")
            }
            Ap::DecTtl => "dec_ttl".into(),
            Ap::ModVlanVid(v) => format!("mod_vlan_vid:{}", pick(&VIDS, &SET_VIDS_OTHER, i(v))),
            Ap::ModVlanPcp(p) => format!("mod_vlan_pcp:{p}"),
            Ap::PushVlan => "push_vlan:0x8100".into(),
            Ap::StripVlan => "strip_vlan".into(),
            Ap::SetReg0(v) => format!("set_field:{v}->reg0"),
            Ap::Resubmit(t) => {
                if sloppy {
                    // May loop back to this table: the depth limit must
                    // stop it the same way on both paths.
                    format!("resubmit(,{})", t % 4)
                } else if table < 3 {
                    format!("resubmit(,{})", table + 1 + t % (3 - table))
                } else {
                    return None;
                }
            }
            Ap::Controller(false) => "controller".into(),
            Ap::Controller(true) => "controller:64".into(),
        })
    }
}

fn action() -> impl Strategy<Value = Ap> {
    prop_oneof![
        6 => (0u8..4).prop_map(Ap::Output),
        2 => Just(Ap::Normal),
        1 => Just(Ap::Flood),
        1 => Just(Ap::InPort),
        1 => (0u8..6).prop_map(Ap::ModDlSrc),
        1 => (0u8..6).prop_map(Ap::ModDlDst),
        2 => (0u8..6).prop_map(Ap::ModNwSrc),
        2 => (0u8..6).prop_map(Ap::ModNwDst),
        2 => (0u8..6).prop_map(Ap::ModTpSrc),
        2 => (0u8..6).prop_map(Ap::ModTpDst),
        2 => (0u8..5).prop_map(Ap::ModNwTos),
        2 => Just(Ap::DecTtl),
        1 => (0u8..4).prop_map(Ap::ModVlanVid),
        1 => prop_oneof![Just(0u8), Just(3u8), Just(5u8)].prop_map(Ap::ModVlanPcp),
        1 => Just(Ap::PushVlan),
        2 => Just(Ap::StripVlan),
        1 => (1u8..3).prop_map(Ap::SetReg0),
        2 => (0u8..3).prop_map(Ap::Resubmit),
        1 => any::<bool>().prop_map(Ap::Controller),
    ]
}

/// The shape of a generated scenario. Neither knob steers around a bug:
/// they shape traffic so that each run spends its cases where it means to.
#[derive(Clone, Copy, Debug)]
struct Gen {
    /// Rules may use `normal`.
    normal: bool,
    /// Every unicast source MAC always enters on its own port (MAC i on
    /// port i+1), no frame has the broadcast source, and rules never
    /// rewrite `dl_src`: `normal` learns stable locations, so most frames
    /// go unicast and the unicast decisions get cached. Unpinned runs
    /// cover MACs moving between ports instead.
    pinned: bool,
    /// Most frames carry one or two tags and most rules push, pop or
    /// rewrite a tag and then decide on one (a `dl_vlan` match in a later
    /// table, `normal`): VLAN actions move tags between the key's slots, so
    /// the megaflow mask must follow them.
    vlan_stacks: bool,
}

#[derive(Clone, Debug)]
struct RuleGen {
    table: u8,
    priority: u16,
    proto: Proto,
    matches: Vec<Mp>,
    actions: Vec<Ap>,
    goto: Option<u8>,
    drop: bool,
    /// Render without the prerequisite filter: may fail to parse (that is
    /// the point: the parser's rejections are exercised too).
    sloppy: bool,
}

impl RuleGen {
    fn render(&self) -> String {
        let mut m: Vec<String> = Vec::new();
        if self.table > 0 {
            m.push(format!("table={}", self.table));
        }
        m.push(format!("priority={}", self.priority));
        m.extend(self.proto.name().map(str::to_string));
        let mut kinds = Vec::new();
        for p in &self.matches {
            if self.sloppy || (p.fits(self.proto) && !kinds.contains(&p.kind())) {
                kinds.push(p.kind());
                m.push(p.render());
            }
        }
        let mut a: Vec<String> = Vec::new();
        if !self.drop {
            for x in &self.actions {
                if self.sloppy || x.fits(self.proto) {
                    a.extend(x.render(self.table, self.sloppy));
                }
            }
            if let Some(g) = self.goto {
                if self.sloppy {
                    a.push(format!("goto_table:{}", g + self.table));
                } else if self.table < 3 {
                    a.push(format!(
                        "goto_table:{}",
                        self.table + 1 + g % (3 - self.table)
                    ));
                }
            }
        }
        if a.is_empty() {
            a.push("drop".into());
        }
        format!("{},actions={}", m.join(","), a.join(","))
    }
}

fn rule(g: Gen) -> impl Strategy<Value = RuleGen> {
    (
        prop_oneof![4 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)],
        prop_oneof![
            Just(0u16),
            Just(1u16),
            Just(10u16),
            Just(100u16),
            Just(32768u16),
            0u16..200
        ],
        proto(),
        prop::collection::vec(match_piece(), 0..4),
        prop::collection::vec(action(), 0..4),
        prop::option::weighted(0.2, 0u8..3),
        prop::bool::weighted(0.08),
        prop::bool::weighted(0.08),
        (
            prop_oneof![
                3 => Just(Ap::StripVlan),
                2 => Just(Ap::PushVlan),
                1 => (0u8..4).prop_map(Ap::ModVlanVid),
                1 => prop_oneof![Just(0u8), Just(5u8)].prop_map(Ap::ModVlanPcp),
            ],
            prop::option::weighted(0.3, (0u8..3).prop_map(Mp::Vlan)),
            prop_oneof![
                2 => Just(Ap::Normal),
                1 => (0u8..3).prop_map(Ap::Resubmit),
            ],
            any::<Index>(),
        ),
    )
        .prop_map(
            move |(table, priority, proto, mut matches, mut actions, goto, drop, sloppy, vlan)| {
                if g.vlan_stacks {
                    // A tag operation, then a decision that reads tags.
                    let (op, m, decide, at) = vlan;
                    let at = at.index(actions.len() + 1);
                    actions.insert(at, decide);
                    actions.insert(at, op);
                    matches.extend(m);
                }
                if !g.normal {
                    actions.retain(|a| !matches!(a, Ap::Normal));
                }
                if g.pinned {
                    actions.retain(|a| !matches!(a, Ap::ModDlSrc(_)));
                }
                RuleGen {
                    table,
                    priority,
                    proto,
                    matches,
                    actions,
                    goto,
                    drop,
                    sloppy,
                }
            },
        )
}

/// A `del-flows` filter.
#[derive(Clone, Debug)]
struct DelGen {
    table: Option<u8>,
    proto: Proto,
    matches: Vec<Mp>,
}

impl DelGen {
    fn render(&self) -> String {
        let mut m: Vec<String> = Vec::new();
        if let Some(t) = self.table {
            m.push(format!("table={t}"));
        }
        m.extend(self.proto.name().map(str::to_string));
        let mut kinds = Vec::new();
        for p in &self.matches {
            if p.fits(self.proto) && !kinds.contains(&p.kind()) {
                kinds.push(p.kind());
                m.push(p.render());
            }
        }
        m.join(",")
    }
}

fn del_filter() -> impl Strategy<Value = DelGen> {
    (
        prop::option::of(0u8..4),
        proto(),
        prop::collection::vec(match_piece(), 0..2),
    )
        .prop_map(|(table, proto, matches)| DelGen {
            table,
            proto,
            matches,
        })
}

#[derive(Clone, Debug)]
enum Change {
    Add(RuleGen),
    Del(DelGen),
}

// ---------------------------------------------------------------------------
// Packets
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum L3g {
    Tcp {
        s: u8,
        d: u8,
        sp: u8,
        dp: u8,
        flags: u8,
    },
    Udp {
        s: u8,
        d: u8,
        sp: u8,
        dp: u8,
    },
    Icmp {
        s: u8,
        d: u8,
        reply: bool,
    },
    Arp {
        reply: bool,
        spa: u8,
        tpa: u8,
    },
    Udp6 {
        s: u8,
        d: u8,
        sp: u8,
        dp: u8,
    },
    Icmp6 {
        s: u8,
        d: u8,
    },
    /// An IPv4 UDP fragment: the first (with the UDP header) or a later one.
    Frag {
        s: u8,
        d: u8,
        later: bool,
    },
    /// A non-IP EtherType.
    Other,
}

#[derive(Clone, Debug)]
struct Pkt {
    port: u8,
    src: u8,
    dst: u8,
    /// (VID index, PCP 3?) per tag, outermost first.
    vlans: Vec<(u8, bool)>,
    l3: L3g,
    tos: u8,
    ttl: u8,
    trunc: Option<u8>,
}

impl Pkt {
    fn frame(&self) -> Vec<u8> {
        let mut b = FrameBuilder::new(MACS[self.src as usize], MACS[self.dst as usize]);
        for &(v, pcp) in &self.vlans {
            b = b.vlan(VIDS[v as usize] | if pcp { 3 << 13 } else { 0 });
        }
        b = b.ttl(TTLS[self.ttl as usize]).tos(TOS[self.tos as usize]);
        let ip4 = |i: &u8| IP4[*i as usize];
        let ip6 = |i: &u8| IP6[*i as usize];
        let l4 = |i: &u8| L4_PORTS[*i as usize];
        b = match &self.l3 {
            L3g::Tcp {
                s,
                d,
                sp,
                dp,
                flags,
            } => b
                .ipv4(ip4(s), ip4(d))
                .tcp(l4(sp), l4(dp), TCP_FLAGS[*flags as usize]),
            L3g::Udp { s, d, sp, dp } => b.ipv4(ip4(s), ip4(d)).udp(l4(sp), l4(dp)),
            L3g::Icmp { s, d, reply } => b
                .ipv4(ip4(s), ip4(d))
                .icmp(if *reply { 0 } else { 8 }, 0)
                .echo(7, 1),
            L3g::Arp { reply, spa, tpa } => {
                let tha = if *reply {
                    MACS[self.dst as usize]
                } else {
                    [0; 6]
                };
                b.arp(
                    if *reply { 2 } else { 1 },
                    MACS[self.src as usize],
                    ip4(spa),
                    tha,
                    ip4(tpa),
                )
            }
            L3g::Udp6 { s, d, sp, dp } => b.ipv6(ip6(s), ip6(d)).udp(l4(sp), l4(dp)),
            L3g::Icmp6 { s, d } => b.ipv6(ip6(s), ip6(d)).icmpv6(128, 0).echo(7, 1),
            L3g::Frag { s, d, later: false } => b
                .ipv4(ip4(s), ip4(d))
                .ipv4_fragment(0, true)
                .udp(L4_PORTS[0], L4_PORTS[1]),
            L3g::Frag { s, d, later: true } => {
                b.ipv4(ip4(s), ip4(d)).ipv4_fragment(185, false).raw_l4(17)
            }
            L3g::Other => b.ethertype(0x88b5),
        };
        let mut f = b.payload(b"nicflow differential").build();
        if let Some(t) = self.trunc {
            f.truncate(TRUNC[t as usize]);
        }
        f
    }
}

fn l3() -> impl Strategy<Value = L3g> {
    prop_oneof![
        4 => (0u8..4, 0u8..4, 0u8..4, 0u8..4, 0u8..5)
            .prop_map(|(s, d, sp, dp, flags)| L3g::Tcp { s, d, sp, dp, flags }),
        4 => (0u8..4, 0u8..4, 0u8..4, 0u8..4).prop_map(|(s, d, sp, dp)| L3g::Udp { s, d, sp, dp }),
        2 => (0u8..4, 0u8..4, any::<bool>()).prop_map(|(s, d, reply)| L3g::Icmp { s, d, reply }),
        2 => (any::<bool>(), 0u8..4, 0u8..4)
            .prop_map(|(reply, spa, tpa)| L3g::Arp { reply, spa, tpa }),
        2 => (0u8..2, 0u8..2, 0u8..4, 0u8..4).prop_map(|(s, d, sp, dp)| L3g::Udp6 { s, d, sp, dp }),
        1 => (0u8..2, 0u8..2).prop_map(|(s, d)| L3g::Icmp6 { s, d }),
        1 => (0u8..4, 0u8..4, any::<bool>()).prop_map(|(s, d, later)| L3g::Frag { s, d, later }),
        1 => Just(L3g::Other),
    ]
}

fn packet(g: Gen) -> impl Strategy<Value = Pkt> {
    (
        0u8..N_PORTS as u8,
        if g.pinned { 0u8..3 } else { 0u8..4 },
        0u8..4,
        prop_oneof![
            if g.vlan_stacks { 1 } else { 5 } => Just(vec![]),
            3 => prop::collection::vec((0u8..2, any::<bool>()), 1..=1),
            if g.vlan_stacks { 5 } else { 2 } => {
                prop::collection::vec((0u8..2, any::<bool>()), 2..=2)
            }
        ],
        l3(),
        0u8..4,
        0u8..4,
        prop::option::weighted(0.05, 0u8..4),
    )
        .prop_map(move |(port, src, dst, vlans, l3, tos, ttl, trunc)| Pkt {
            port: if g.pinned { src } else { port },
            src,
            dst,
            vlans,
            l3,
            tos,
            ttl,
            trunc,
        })
}

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Scenario {
    gen: Gen,
    rules: Vec<RuleGen>,
    /// The distinct packets ("flows") of the stream.
    templates: Vec<Pkt>,
    /// The stream: a template, optionally entering on another port.
    stream: Vec<(Index, Option<u8>)>,
    /// Batch sizes, used in turn.
    batches: Vec<usize>,
    /// Rule changes, each applied before the batch its index selects.
    changes: Vec<(Index, Change)>,
}

impl Scenario {
    fn frames(&self) -> Vec<Input> {
        self.stream
            .iter()
            .map(|(i, port)| {
                let mut p = i.get(&self.templates).clone();
                if let (Some(port), false) = (port, self.gen.pinned) {
                    p.port = *port;
                }
                Input {
                    port: p.port as usize,
                    frame: p.frame(),
                    desc: format!("{p:?}"),
                }
            })
            .collect()
    }
}

fn scenario(
    g: Gen,
    n_rules: usize,
    n_pkts: usize,
    n_changes: usize,
) -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec(rule(g), 0..=n_rules),
        prop::collection::vec(packet(g), 1..24),
        prop::collection::vec(
            (
                any::<Index>(),
                prop::option::weighted(0.2, 0u8..N_PORTS as u8),
            ),
            1..=n_pkts,
        ),
        prop::collection::vec(1usize..=40, 1..8),
        prop::collection::vec(
            (
                any::<Index>(),
                prop_oneof![
                    3 => rule(g).prop_map(Change::Add),
                    2 => del_filter().prop_map(Change::Del),
                ],
            ),
            0..=n_changes,
        ),
    )
        .prop_map(
            move |(rules, templates, stream, batches, changes)| Scenario {
                gen: g,
                rules,
                templates,
                stream,
                batches,
                changes,
            },
        )
}

// ---------------------------------------------------------------------------
// The harness: two bridges, one input
// ---------------------------------------------------------------------------

/// One frame to inject: the port (0-based), a description for failure
/// reports, the bytes.
struct Input {
    port: usize,
    desc: String,
    frame: Vec<u8>,
}

struct Side {
    br: Bridge,
    h: Vec<MemHandle>,
}

impl Side {
    fn new(cfg: DatapathConfig) -> Side {
        let mut br = Bridge::new("br0", cfg);
        let mut h = Vec::new();
        for i in 1..=N_PORTS {
            let (p, hd) = MemPort::new(&format!("p{i}"));
            br.add_port(Box::new(p)).expect("add port");
            h.push(hd);
        }
        Side { br, h }
    }
}

/// Totals over every case of a run, checked once the run is over.
#[derive(Default, Debug)]
struct Totals {
    cases: u64,
    rules: u64,
    parsed: u64,
    packets: u64,
    cache_hits: u64,
    upcalls: u64,
    outputs: u64,
    changes: u64,
}

fn hex(f: &[u8]) -> String {
    f.iter().map(|b| format!("{b:02x}")).collect()
}

/// The cached and the reference bridge, driven in lockstep.
struct Pair {
    cached: Side,
    reference: Side,
    now: Instant,
    /// Every rule and change applied so far, for failure reports.
    log: String,
}

impl Pair {
    fn new() -> Pair {
        Pair {
            cached: Side::new(DatapathConfig::default()),
            reference: Side::new(DatapathConfig {
                caches_enabled: false,
                ..Default::default()
            }),
            now: Instant::now(),
            log: String::new(),
        }
    }

    /// Add one rule to both; `Ok(parsed?)`.
    fn add(&mut self, text: &str) -> Result<Result<(), String>, TestCaseError> {
        let a = self.cached.br.add_flow_str(text, self.now);
        let b = self.reference.br.add_flow_str(text, self.now);
        prop_assert_eq!(
            a.is_ok(),
            b.is_ok(),
            "bridges disagree on whether `{}` parses",
            text
        );
        match a {
            Ok(()) => {
                let _ = writeln!(self.log, "  add-flow {text}");
                Ok(Ok(()))
            }
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    fn del(&mut self, text: &str) -> Result<(), TestCaseError> {
        let a = self.cached.br.del_flows_str(text);
        let b = self.reference.br.del_flows_str(text);
        match (&a, &b) {
            (Ok(x), Ok(y)) => {
                prop_assert_eq!(x, y, "del-flows `{}` removed different counts", text)
            }
            (Err(_), Err(_)) => {}
            _ => prop_assert!(false, "bridges disagree on whether `{}` parses", text),
        }
        let _ = writeln!(self.log, "  del-flows '{text}' -> {a:?}");
        Ok(())
    }

    /// Inject one batch into both bridges, run them, compare everything.
    /// Returns what each port transmitted (the same on both sides).
    fn batch(&mut self, n: usize, pkts: &[Input]) -> Result<Vec<Vec<Vec<u8>>>, TestCaseError> {
        for p in pkts {
            self.cached.h[p.port].inject(&p.frame);
            self.reference.h[p.port].inject(&p.frame);
        }
        self.cached.br.run_until_idle(self.now);
        self.reference.br.run_until_idle(self.now);
        let _ = writeln!(self.log, "  batch {n}: {} packets", pkts.len());
        let mut outputs = Vec::new();
        for port in 0..N_PORTS {
            let a = self.cached.h[port].take_tx();
            let b = self.reference.h[port].take_tx();
            if a != b {
                let i = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
                let mut msg = format!(
                    "batch {n}: port p{} got {} frames with caches, {} without; first difference at frame {i}\n  cached:    {}\n  reference: {}\n",
                    port + 1,
                    a.len(),
                    b.len(),
                    a.get(i).map_or("-".into(), |f| hex(f)),
                    b.get(i).map_or("-".into(), |f| hex(f)),
                );
                self.report(&mut msg, pkts);
                return Err(TestCaseError::fail(msg));
            }
            outputs.push(b);
        }
        let ca: Vec<(u32, Vec<u8>)> = self
            .cached
            .br
            .datapath_mut()
            .take_controller_packets()
            .into_iter()
            .map(|p| (p.in_port, p.data))
            .collect();
        let cb: Vec<(u32, Vec<u8>)> = self
            .reference
            .br
            .datapath_mut()
            .take_controller_packets()
            .into_iter()
            .map(|p| (p.in_port, p.data))
            .collect();
        if ca != cb {
            let mut msg = format!(
                "batch {n}: controller queues differ: {} with caches, {} without\n",
                ca.len(),
                cb.len()
            );
            self.report(&mut msg, pkts);
            return Err(TestCaseError::fail(msg));
        }
        let (da, db) = (
            self.cached.br.dp_stats().drops(),
            self.reference.br.dp_stats().drops(),
        );
        if da != db {
            let mut msg = format!(
                "batch {n}: drop counters differ\n  cached:    {da:?}\n  reference: {db:?}\n"
            );
            self.report(&mut msg, pkts);
            return Err(TestCaseError::fail(msg));
        }
        prop_assert!(
            !da.iter().any(|(r, _)| *r == "upcall_budget"),
            "upcall budget hit with the default budget: {:?}",
            da
        );
        Ok(outputs)
    }

    fn report(&self, msg: &mut String, pkts: &[Input]) {
        let _ = writeln!(msg, "history:\n{}", self.log);
        let _ = writeln!(msg, "this batch:");
        for p in pkts {
            let _ = writeln!(
                msg,
                "  p{}: {}\n      {}",
                p.port + 1,
                p.desc,
                hex(&p.frame)
            );
        }
        let _ = writeln!(msg, "cached datapath flows:");
        for d in self.cached.br.dump_dp_flows(self.now) {
            let _ = writeln!(
                msg,
                "  {} packets:{} actions:{}",
                d.matching, d.packets, d.actions
            );
        }
    }
}

fn run_scenario(sc: &Scenario, totals: &mut Totals) -> Result<(), TestCaseError> {
    let mut pair = Pair::new();
    for r in &sc.rules {
        let text = r.render();
        totals.rules += 1;
        match pair.add(&text)? {
            Ok(()) => totals.parsed += 1,
            Err(e) => prop_assert!(r.sloppy, "generated rule `{}` does not parse: {}", text, e),
        }
    }
    let frames = sc.frames();
    let n_batches = {
        let (mut pos, mut n) = (0, 0);
        while pos < frames.len() {
            pos += sc.batches[n % sc.batches.len()];
            n += 1;
        }
        n
    };
    let mut changes: Vec<(usize, &Change)> = sc
        .changes
        .iter()
        .map(|(i, c)| (i.index(n_batches), c))
        .collect();
    changes.sort_by_key(|(b, _)| *b);
    let (mut pos, mut n) = (0, 0);
    while pos < frames.len() {
        for (_, c) in changes.iter().filter(|(b, _)| *b == n) {
            totals.changes += 1;
            match c {
                Change::Add(r) => {
                    let text = r.render();
                    if let Err(e) = pair.add(&text)? {
                        prop_assert!(r.sloppy, "generated rule `{}` does not parse: {}", text, e);
                    }
                }
                Change::Del(d) => pair.del(&d.render())?,
            }
        }
        let k = sc.batches[n % sc.batches.len()].min(frames.len() - pos);
        let out = pair.batch(n, &frames[pos..pos + k])?;
        totals.outputs += out.iter().map(|o| o.len() as u64).sum::<u64>();
        pos += k;
        n += 1;
    }
    let s = pair.cached.br.dp_stats();
    totals.cases += 1;
    totals.packets += s.packets;
    totals.cache_hits += s.emc_hits + s.megaflow_hits;
    totals.upcalls += s.upcalls;
    prop_assert_eq!(
        pair.reference.br.dp_stats().emc_hits + pair.reference.br.dp_stats().megaflow_hits,
        0,
        "the reference bridge must not use caches"
    );
    Ok(())
}

/// The seeds CI runs, the same every run: a failure on main is a failure
/// on every machine. Each seed drives `cases` generated scenarios.
const FIXED_SEEDS: [u64; 4] = [
    0x6e69_6366_6c6f_7701,
    0x0000_0000_0000_002a,
    0xdead_beef_cafe_f00d,
    0x1f2e_3d4c_5b6a_7988,
];

/// Which seeds to run: `DIFF_SEED=S` replays one (decimal or `0x` hex),
/// `DIFF_RANDOM=N` draws N fresh ones (a longer random run), otherwise
/// [`FIXED_SEEDS`].
fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("DIFF_SEED") {
        let s = s.trim();
        let seed = match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(&h.replace('_', ""), 16),
            None => s.parse(),
        };
        return vec![seed.unwrap_or_else(|_| panic!("DIFF_SEED=`{s}` is not a number"))];
    }
    if let Ok(n) = std::env::var("DIFF_RANDOM") {
        let n: usize = n
            .parse()
            .unwrap_or_else(|_| panic!("DIFF_RANDOM=`{n}` is not a count"));
        return (0..n).map(|_| rand::random()).collect();
    }
    FIXED_SEEDS.to_vec()
}

/// A proptest runner whose whole run (generation and shrinking) follows
/// from `seed`.
fn runner(cases: u32, seed: u64) -> TestRunner {
    use proptest::test_runner::{RngAlgorithm, TestRng};
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..Config::default()
    };
    let mut bytes = [0u8; 32];
    // SplitMix64 spreads the seed over the ChaCha key.
    let mut x = seed;
    for chunk in bytes.chunks_mut(8) {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

/// Run `cases` scenarios per seed (see [`seeds`]); `test` is the test
/// function's name, for the replay command a failure prints.
fn run(test: &str, cases: u32, strategy: impl Strategy<Value = Scenario>) -> Totals {
    let totals = std::cell::RefCell::new(Totals::default());
    for seed in seeds() {
        eprintln!("{test}: seed {seed:#018x}, {cases} cases");
        let mut runner = runner(cases, seed);
        let result = runner.run(&strategy, |sc| run_scenario(&sc, &mut totals.borrow_mut()));
        if let Err(e) = result {
            panic!(
                "{test}: seed {seed:#018x}: {e}\n\
                 replay: DIFF_SEED={seed:#018x} cargo test -p nicflow --test differential -- --exact {test}"
            );
        }
    }
    let totals = totals.into_inner();
    eprintln!("{test}: {totals:?}");
    // The run must have been meaningful: rules parsed, caches used, traffic
    // forwarded.
    assert!(
        totals.parsed * 10 >= totals.rules * 8,
        "too few generated rules parse: {totals:?}"
    );
    assert!(
        totals.cache_hits > 0,
        "the caches were never used: {totals:?}"
    );
    assert!(
        totals.cache_hits * 5 >= totals.packets,
        "under 20% of packets hit a cache: {totals:?}"
    );
    assert!(totals.outputs > 0, "nothing was ever forwarded: {totals:?}");
    totals
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// Everything but `normal`; any packet on any port.
const FREE: Gen = Gen {
    normal: false,
    pinned: false,
    vlan_stacks: false,
};
/// `normal` included; sources pinned to ports.
const LEARNING: Gen = Gen {
    normal: true,
    pinned: true,
    vlan_stacks: false,
};
/// `normal` with sources on any port: MACs move back and forth.
const ROAMING: Gen = Gen {
    normal: true,
    pinned: false,
    vlan_stacks: false,
};
/// Tag stacks everywhere, `normal` included, rule changes.
const VLAN_STACKS: Gen = Gen {
    normal: true,
    pinned: true,
    vlan_stacks: true,
};

/// Cases per seed: `DIFF_CASES` overrides the test's default.
fn cases(default: u32) -> u32 {
    std::env::var("DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Static rule set, random traffic on random ports in random batches.
#[test]
fn cached_and_uncached_paths_agree() {
    run(
        "cached_and_uncached_paths_agree",
        cases(64),
        scenario(FREE, 30, 300, 0),
    );
}

/// The same with `normal` in the rules: MAC learning, flooding, unicast.
#[test]
fn cached_and_uncached_paths_agree_with_normal() {
    run(
        "cached_and_uncached_paths_agree_with_normal",
        cases(48),
        scenario(LEARNING, 30, 300, 0),
    );
}

/// Rules added and deleted between batches: revalidation must leave no
/// cached flow that disagrees with a fresh translation.
#[test]
fn cached_and_uncached_paths_agree_across_rule_changes() {
    let t = run(
        "cached_and_uncached_paths_agree_across_rule_changes",
        cases(128),
        scenario(FREE, 30, 300, 10),
    );
    assert!(t.changes > 0);
}

/// Rule changes with `normal` and live learning: a change can move cached
/// `normal` flows to another VLAN or another decision.
#[test]
fn cached_and_uncached_paths_agree_with_normal_across_rule_changes() {
    let t = run(
        "cached_and_uncached_paths_agree_with_normal_across_rule_changes",
        cases(64),
        scenario(LEARNING, 30, 300, 10),
    );
    assert!(t.changes > 0);
}

/// Frames with one and two tags through rules that push, pop and rewrite
/// tags before deciding on them.
#[test]
fn cached_and_uncached_paths_agree_on_vlan_stacks() {
    run(
        "cached_and_uncached_paths_agree_on_vlan_stacks",
        cases(64),
        scenario(VLAN_STACKS, 30, 300, 10),
    );
}

/// `normal`, rule changes and MACs moving between ports.
#[test]
fn cached_and_uncached_paths_agree_with_normal_and_mac_moves() {
    let t = run(
        "cached_and_uncached_paths_agree_with_normal_and_mac_moves",
        cases(48),
        scenario(ROAMING, 30, 300, 10),
    );
    assert!(t.changes > 0);
}

// ---------------------------------------------------------------------------
// Deterministic cases
// ---------------------------------------------------------------------------

const A: [u8; 6] = MACS[0];
const B: [u8; 6] = MACS[1];
const C: [u8; 6] = MACS[2];
const BCAST: [u8; 6] = MACS[3];

fn udp_frame(src: [u8; 6], dst: [u8; 6]) -> Vec<u8> {
    FrameBuilder::new(src, dst)
        .ipv4(IP4[0], IP4[1])
        .udp(1000, 2000)
        .payload(b"mac move")
        .build()
}

fn input(port: usize, frame: Vec<u8>) -> Input {
    Input {
        port,
        desc: String::new(),
        frame,
    }
}

/// Install `rules` on both bridges and run `batches` through them in
/// lockstep; `Err` describes the first difference.
fn lockstep(rules: &[&str], batches: Vec<Vec<Input>>) -> Result<Pair, String> {
    let mut pair = Pair::new();
    for r in rules {
        match pair.add(r) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("`{r}`: {e}")),
            Err(e) => return Err(e.to_string()),
        }
    }
    for (n, b) in batches.iter().enumerate() {
        pair.batch(n, b).map_err(|e| e.to_string())?;
    }
    Ok(pair)
}

/// A MAC that moves to a new port is followed at once, by the cached flows
/// that point at it too.
#[test]
fn normal_follows_mac_moves() {
    let mut pair = lockstep(&["actions=normal"], vec![]).unwrap();
    let mut n = 0;
    // Send one frame; return how many frames each port transmitted.
    let mut step = |port: usize, frame: Vec<u8>| -> Vec<usize> {
        n += 1;
        let out = pair
            .batch(n, &[input(port, frame)])
            .unwrap_or_else(|e| panic!("{e}"));
        out.iter().map(Vec::len).collect()
    };
    // A on p1 and B on p2 introduce themselves (flooded).
    assert_eq!(step(0, udp_frame(A, BCAST)), [0, 1, 1, 1]);
    assert_eq!(step(1, udp_frame(B, BCAST)), [1, 0, 1, 1]);
    // B -> A is unicast to p1, and then served from the cache.
    for _ in 0..3 {
        assert_eq!(step(1, udp_frame(B, A)), [1, 0, 0, 0]);
    }
    // A moves to p3 (and talks to B, unicast).
    assert_eq!(step(2, udp_frame(A, B)), [0, 1, 0, 0]);
    // The cached B -> A flow must follow A to p3.
    assert_eq!(step(1, udp_frame(B, A)), [0, 0, 1, 0]);
    assert_eq!(step(1, udp_frame(B, A)), [0, 0, 1, 0]);
    let s = pair.cached.br.dp_stats();
    assert!(s.emc_hits + s.megaflow_hits >= 3, "{s:?}");
    assert!(s.flows_fixed >= 1, "the B -> A flow was not fixed: {s:?}");
}

/// Seeded traffic through `normal` with MACs moving to new ports. MAC
/// learning is per (VLAN, MAC), so each MAC keeps one VLAN; every source is
/// learned once up front, each move is the only frame of its batch, and no
/// MAC ever returns to a port it left (see the `bug_normal_*` tests for
/// what goes wrong otherwise).
#[test]
fn normal_mac_moves_seeded() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    let rules = [
        "priority=0,actions=normal",
        "priority=100,udp,tp_dst=53,actions=drop",
        "priority=50,dl_vlan=10,actions=mod_vlan_vid:30,normal",
        "priority=60,tcp,actions=dec_ttl,normal",
    ];
    // (MAC, VLAN tag or none).
    let srcs = [(A, None), (B, Some(10u16)), (C, Some(20u16))];
    for seed in [1u64, 7, 42, 1234] {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut at = [0usize, 1, 2];
        let mut moves = [0u8; 3];
        let frame = |rng: &mut StdRng, who: usize, dst: [u8; 6]| {
            let (mac, vlan) = srcs[who];
            let mut b = FrameBuilder::new(mac, dst);
            if let Some(v) = vlan {
                b = b.vlan(v);
            }
            let b = b.ipv4(IP4[rng.gen_range(0..4)], IP4[rng.gen_range(0..4)]);
            match rng.gen_range(0..3) {
                0 => b.udp(L4_PORTS[rng.gen_range(0..4)], L4_PORTS[rng.gen_range(0..4)]),
                1 => b.tcp(1000, 80, 0x10),
                _ => b.icmp(8, 0),
            }
            .build()
        };
        let mut batches: Vec<Vec<Input>> = Vec::new();
        for (who, port) in at.iter().enumerate() {
            batches.push(vec![input(*port, frame(&mut rng, who, BCAST))]);
        }
        let mut cur: Vec<Input> = Vec::new();
        let mut n_moves = 0;
        let mut limit = rng.gen_range(1..=40);
        for _ in 0..300 {
            let who = rng.gen_range(0..3);
            let moved = moves[who] < 3 && rng.gen_bool(0.03);
            if moved {
                // On to the next port, never one it was on before.
                moves[who] += 1;
                at[who] = (at[who] + 1) % N_PORTS;
                n_moves += 1;
                batches.push(std::mem::take(&mut cur));
            }
            let dst = MACS[rng.gen_range(0..4)];
            cur.push(Input {
                port: at[who],
                desc: format!("src {who} on p{} (moved: {moved})", at[who] + 1),
                frame: frame(&mut rng, who, dst),
            });
            if moved || cur.len() >= limit {
                batches.push(std::mem::take(&mut cur));
                limit = rng.gen_range(1..=40);
            }
        }
        batches.push(cur);
        batches.retain(|b| !b.is_empty());
        let pair = lockstep(&rules, batches).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let s = pair.cached.br.dp_stats();
        assert!(n_moves > 0, "seed {seed}: no MAC moved");
        assert!(s.emc_hits + s.megaflow_hits > 0, "seed {seed}: {s:?}");
        // A MAC move either fixes cached flows in place (flows towards the
        // MAC) or removes them (flows from it, which must come back up to
        // learn): either way revalidation must have acted.
        assert!(
            s.flows_fixed + s.flows_removed > 0,
            "seed {seed}: no flow was revalidated: {s:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Regressions: minimal reproductions of bugs this test found (all fixed)
// ---------------------------------------------------------------------------

/// Run each `(rule, frame carrying the value the rule writes, frame that
/// differs only there)` case: the first frame's flow must not turn the
/// rewrite into a no-op for the second.
fn rewrite_cases(cases: &[(&str, Vec<u8>, Vec<u8>)]) -> Vec<String> {
    cases
        .iter()
        .filter_map(|(rule, first, second)| {
            let rules = [*rule];
            lockstep(
                &rules,
                vec![
                    vec![input(0, first.clone())],
                    vec![input(0, second.clone())],
                ],
            )
            .err()
            .map(|e| {
                format!(
                    "`{rule}`: {}",
                    e.lines().take(3).collect::<Vec<_>>().join("\n")
                )
            })
        })
        .collect()
}

fn v4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, tos: u8) -> Vec<u8> {
    FrameBuilder::new(A, B)
        .ipv4(src, dst)
        .tos(tos)
        .udp(sport, dport)
        .build()
}

/// A rewrite to the value the first packet already carries emits no
/// datapath action, and the field is not in the megaflow mask, so later
/// packets with other values pass unrewritten.
#[test]
fn regression_rewrite_to_the_packets_own_value_is_cached_as_a_noop() {
    let (a, b) = (IP4[0], IP4[1]);
    let vlan = |vid: u16| {
        FrameBuilder::new(A, B)
            .vlan(vid)
            .ipv4(a, b)
            .udp(1, 2)
            .build()
    };
    let eth = |src, dst| FrameBuilder::new(src, dst).ipv4(a, b).udp(1, 2).build();
    let v6 = |s: Ipv6Addr| FrameBuilder::new(A, B).ipv6(s, IP6[1]).udp(1, 2).build();
    let failures = rewrite_cases(&[
        (
            "ip,actions=mod_nw_src:198.18.0.1,output:p2",
            v4(a, b, 1, 2, 0),
            v4(b, b, 1, 2, 0),
        ),
        (
            "ip,actions=mod_nw_dst:198.18.0.2,output:p2",
            v4(a, b, 1, 2, 0),
            v4(a, a, 1, 2, 0),
        ),
        (
            "udp,actions=mod_tp_src:1,output:p2",
            v4(a, b, 1, 2, 0),
            v4(a, b, 7, 2, 0),
        ),
        (
            "udp,actions=mod_tp_dst:2,output:p2",
            v4(a, b, 1, 2, 0),
            v4(a, b, 1, 7, 0),
        ),
        (
            "ip,actions=mod_nw_tos:32,output:p2",
            v4(a, b, 1, 2, 0x20),
            v4(a, b, 1, 2, 0),
        ),
        (
            "actions=mod_dl_src:02:00:00:00:00:01,output:p2",
            eth(A, B),
            eth(C, B),
        ),
        (
            "actions=mod_dl_dst:02:00:00:00:00:02,output:p2",
            eth(A, B),
            eth(A, C),
        ),
        ("actions=mod_vlan_vid:10,output:p2", vlan(10), vlan(20)),
        (
            "ipv6,actions=set_field:2001:db8::1->ipv6_src,output:p2",
            v6(IP6[0]),
            v6(IP6[1]),
        ),
    ]);
    assert!(
        failures.is_empty(),
        "{} of 9 rewrites cached as no-ops:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `mod_vlan_vid` / `mod_vlan_pcp` on a tagged frame rewrite the whole TCI
/// with the *first* packet's other bits, which the megaflow wildcards.
#[test]
fn regression_rewrite_mod_vlan_leaks_the_first_packets_tci() {
    let tagged = |tci: u16| {
        FrameBuilder::new(A, B)
            .vlan(tci)
            .ipv4(IP4[0], IP4[1])
            .udp(1, 2)
            .build()
    };
    let failures = rewrite_cases(&[
        // PCP 3 of the first frame is written onto the second (PCP 0).
        (
            "dl_vlan=10,actions=mod_vlan_vid:20,output:p2",
            tagged(3 << 13 | 10),
            tagged(10),
        ),
        // VID 10 of the first frame is written onto the second (VID 20):
        // the frame changes VLAN.
        ("actions=mod_vlan_pcp:5,output:p2", tagged(10), tagged(20)),
    ]);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `mod_nw_tos` commits the whole TOS byte, ECN bits included, while the
/// megaflow does not match the ECN bits.
#[test]
fn regression_rewrite_mod_nw_tos_leaks_the_first_packets_ecn() {
    let (a, b) = (IP4[0], IP4[1]);
    let failures = rewrite_cases(&[(
        "ip,actions=mod_nw_tos:32,output:p2",
        v4(a, b, 1, 2, 0x01),
        v4(a, b, 1, 2, 0x00),
    )]);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A on p1, then A on p2, then A back on p1: the last frame hits the flow
/// cached for (p1, A -> B), so `normal` never relearns A on p1 and B -> A
/// keeps going to p2. The slow path alone sends it to p1.
#[test]
fn regression_normal_mac_returning_to_a_cached_port_is_not_relearned() {
    let r = lockstep(
        &["actions=normal"],
        vec![
            vec![input(0, udp_frame(A, B))],
            vec![input(1, udp_frame(A, B))],
            vec![input(0, udp_frame(A, B))],
            vec![input(2, udp_frame(B, A))],
        ],
    );
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// Within one receive batch, frames that hit the caches in the lookup stage
/// use decisions made before an earlier frame of the same batch moved a MAC.
#[test]
fn regression_normal_stale_decision_within_a_batch() {
    let r = lockstep(
        &["actions=normal"],
        vec![
            // B on p2, A on p1; A -> B cached as "output p2".
            vec![input(1, udp_frame(B, BCAST))],
            vec![input(0, udp_frame(A, B))],
            // One batch from p1: B moves to p1, then A -> B: must go nowhere.
            vec![input(0, udp_frame(B, C)), input(0, udp_frame(A, B))],
        ],
    );
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// A rule change makes cached `normal` flows learn in another VLAN.
/// Revalidation re-translates without learning and keeps the flows (their
/// mask did not grow), so A's traffic never reaches the slow path again and
/// (VLAN 30, A) is never learned: B -> A floods forever instead of going to
/// p1.
#[test]
fn regression_normal_flow_fixed_by_revalidation_never_learns() {
    let mut pair = lockstep(
        &["actions=normal"],
        vec![
            vec![input(0, udp_frame(A, B))],
            vec![input(1, udp_frame(B, A))],
        ],
    )
    .unwrap();
    // Same match and priority: replaces the rule; both flows are fixed.
    pair.add("actions=mod_vlan_vid:30,normal").unwrap().unwrap();
    let out = pair
        .batch(2, &[input(0, udp_frame(A, B))])
        .and_then(|_| pair.batch(3, &[input(1, udp_frame(B, A))]));
    if let Err(e) = out {
        panic!("{e}");
    }
}

/// Found along the way (both paths agree; the output is wrong on both):
/// `push_vlan` onto a frame that already has two tags makes the executor's
/// re-parse fail (`TooManyVlanTags`), the stale layout is kept, and every
/// later rewrite lands 4 bytes early: `mod_nw_dst` rewrites the *source*
/// address and the checksum patches hit the IPv4 flags/fragment field and
/// the UDP destination port.
#[test]
fn regression_push_vlan_on_a_double_tagged_frame_misplaces_later_rewrites() {
    let mut pair = lockstep(
        &["ip,actions=push_vlan:0x8100,mod_nw_dst:198.18.0.9,output:p2"],
        vec![],
    )
    .unwrap();
    let frame = |tags: &[u16], dst: Ipv4Addr| {
        let mut b = FrameBuilder::new(A, B);
        for t in tags {
            b = b.vlan(*t);
        }
        b.ipv4(IP4[0], dst).udp(1, 2).build()
    };
    let out = pair
        .batch(0, &[input(0, frame(&[10, 20], IP4[1]))])
        .unwrap_or_else(|e| panic!("{e}"));
    // The new outer tag copies the old outer one (VID 10).
    let want = frame(&[10, 10, 20], Ipv4Addr::new(198, 18, 0, 9));
    assert_eq!(hex(&out[1][0]), hex(&want));
}

fn tagged_udp(src: [u8; 6], dst: [u8; 6], tags: &[u16]) -> Vec<u8> {
    let mut b = FrameBuilder::new(src, dst);
    for t in tags {
        b = b.vlan(*t);
    }
    b.ipv4(IP4[0], IP4[1]).udp(1000, 2000).build()
}

/// Issue 18's minimal case: after `strip_vlan`, `normal` learns and looks
/// up in the *inner* tag's VLAN, but the cached flow matched only the outer
/// tag, so a single-tagged frame (VLAN 0 after the strip) reused the
/// double-tagged frame's unicast decision instead of flooding.
#[test]
fn regression_strip_vlan_then_normal_uses_the_inner_tag() {
    let r = lockstep(
        &["priority=0,actions=strip_vlan,normal"],
        vec![
            // C on p3 in (inner) VLAN 20.
            vec![input(2, tagged_udp(C, BCAST, &[3 << 13 | 10, 20]))],
            // B -> C, double tagged: unicast to p3, cached.
            vec![input(1, tagged_udp(B, C, &[3 << 13 | 10, 20]))],
            vec![input(1, tagged_udp(B, C, &[3 << 13 | 10, 20]))],
            // B -> C with the outer tag only: C is unknown in VLAN 0, flood.
            vec![input(1, tagged_udp(B, C, &[3 << 13 | 10]))],
            // And another inner VLAN: unknown there too.
            vec![input(1, tagged_udp(B, C, &[10, 30]))],
        ],
    );
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// The same shift seen by a table lookup: after `strip_vlan` the next
/// table's `dl_vlan` match reads what arrived as the inner tag, so that is
/// the tag the cached flow must match.
#[test]
fn regression_lookup_after_strip_vlan_matches_the_inner_tag() {
    let r = lockstep(
        &[
            "table=0,actions=strip_vlan,resubmit(,1)",
            "table=1,priority=10,dl_vlan=20,actions=output:p3",
            "table=1,priority=0,actions=output:p4",
        ],
        vec![
            vec![input(0, tagged_udp(A, B, &[10, 20]))],
            vec![input(0, tagged_udp(A, B, &[10, 20]))],
            vec![input(0, tagged_udp(A, B, &[10, 30]))],
            vec![input(0, tagged_udp(A, B, &[10]))],
            vec![input(0, tagged_udp(A, B, &[11, 20]))],
        ],
    );
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// After `push_vlan` the old outer tag is the inner one: a lookup on the
/// inner tag reads the received outer tag.
#[test]
fn regression_push_vlan_then_lookup_and_normal() {
    let r = lockstep(
        &[
            "table=0,actions=push_vlan:0x8100,mod_vlan_vid:99,resubmit(,1)",
            "table=1,priority=10,dl_vlan=99,actions=pop_vlan,resubmit(,2)",
            "table=2,priority=10,dl_vlan=20,actions=output:p3",
            "table=2,priority=0,actions=normal",
        ],
        vec![
            vec![input(0, tagged_udp(A, B, &[20]))],
            vec![input(0, tagged_udp(A, B, &[20]))],
            vec![input(0, tagged_udp(A, B, &[30]))],
            vec![input(1, tagged_udp(B, A, &[30]))],
            vec![input(0, tagged_udp(A, B, &[30]))],
            vec![input(0, tagged_udp(A, B, &[]))],
            vec![input(0, tagged_udp(A, B, &[20, 30]))],
        ],
    );
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// Per-packet select groups (`rr`, `wrr`, `splb`) give the cached path —
/// one datapath flow whose `select` action chooses per packet — the same
/// outputs, packet for packet, as translating every packet: buckets with
/// rewrites that must not leak into the actions after the group, a
/// per-packet group inside an `all` group's bucket, and several flows
/// sharing one group's rotation within and across batches.
#[test]
fn per_packet_select_groups_agree() {
    let groups = [
        "group_id=1,type=select,selection_method=rr,\
         bucket=actions=mod_vlan_vid:30,output:p2,\
         bucket=actions=mod_tp_src:8080,output:p3,\
         bucket=actions=mod_nw_src:198.18.9.1,output:p4",
        "group_id=2,type=select,selection_method=wrr,\
         bucket=weight:3,actions=mod_dl_dst:02:00:00:00:00:a1,output:p2,\
         bucket=weight:1,actions=output:p3",
        "group_id=3,type=all,bucket=actions=group:1,bucket=actions=output:p4",
        "group_id=4,type=select,selection_method=splb,\
         bucket=weight:2,actions=output:p2,bucket=actions=output:p3",
    ];
    let mut pair = Pair::new();
    for g in groups {
        for side in [&mut pair.cached, &mut pair.reference] {
            side.br.add_groups_str(g, false, pair.now).unwrap();
        }
    }
    let r = (|| -> Result<(), String> {
        for r in [
            "priority=10,udp,tp_dst=2000,actions=group:1,output:p1",
            "priority=10,udp,tp_dst=53,actions=group:2",
            "priority=10,tcp,actions=group:3",
            "priority=5,ip,actions=group:4",
            "priority=0,actions=drop",
        ] {
            pair.add(r)
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("`{r}`: {e}"))?;
        }
        let frames = [
            udp_frame(A, B),
            FrameBuilder::new(B, A)
                .ipv4(IP4[1], IP4[2])
                .udp(5000, 53)
                .build(),
            FrameBuilder::new(A, C)
                .ipv4(IP4[0], IP4[3])
                .tcp(1000, 80, 0x10)
                .build(),
            FrameBuilder::new(C, A)
                .ipv4(IP4[2], IP4[0])
                .udp(7, 9)
                .build(),
            FrameBuilder::new(A, B)
                .ipv4(IP4[0], IP4[1])
                .udp(1001, 2000)
                .build(),
        ];
        for n in 0..12 {
            // Varying mixes: a flow's packets within one batch, and flows
            // interleaved on one group.
            let batch: Vec<Input> = (0..=n % 4)
                .flat_map(|k| {
                    frames
                        .iter()
                        .enumerate()
                        .filter(move |(i, _)| (i + n + k) % 3 != 0)
                        .map(|(_, f)| input(0, f.clone()))
                })
                .collect();
            pair.batch(n, &batch).map_err(|e| e.to_string())?;
        }
        Ok(())
    })();
    if let Err(e) = r {
        panic!("{e}");
    }
    let flows = pair.cached.br.dump_dp_flows(pair.now);
    assert!(
        flows.iter().any(|f| f.actions.contains("select(rr,g=1,")),
        "{flows:#?}"
    );
}
