//! Property tests: printing and parsing are inverse, and no input panics.
//!
//! * Random *valid* rules (built directly as `FlowSpec`s, covering every
//!   field, mask shape, protocol and action the parser can produce) print and
//!   parse back to themselves, with numeric and with named ports.
//! * Any text that parses prints to text that parses to the same rule
//!   (checked by `fuzz_rule` on a hand-written corpus, on random mutations of
//!   it and on random strings, which must also never panic).

use nicflow_flow::{ofp, Action, Field, FlowKey, Match, Prereq};
use nicflow_ofctl::*;
use proptest::prelude::*;

// ------------------------------------------------------------ generators

fn full(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// Protocol layer of a generated match: `(dl_type, nw_proto)`.
fn proto() -> impl Strategy<Value = (Option<u16>, Option<u8>)> {
    let nw = prop_oneof![
        Just(None),
        Just(Some(6)),
        Just(Some(17)),
        Just(Some(132)),
        Just(Some(1)),
        Just(Some(58)),
        any::<u8>().prop_map(Some),
    ];
    prop_oneof![
        Just((None, None)),
        nw.clone().prop_map(|p| (Some(0x0800), p)),
        nw.prop_map(|p| (Some(0x86dd), p)),
        Just((Some(0x0806), None)),
        any::<u8>().prop_map(|op| (Some(0x0806), Some(op))),
        any::<u16>()
            .prop_filter("not ip/ipv6/arp", |t| ![0x0800, 0x86dd, 0x0806].contains(t))
            .prop_map(|t| (Some(t), None)),
    ]
}

/// Fields a match may use given its protocol layer: `(any protocol,
/// specific to this protocol)`.
fn candidates(dl: Option<u16>, nw: Option<u8>) -> (Vec<Field>, Vec<Field>) {
    let mut common = vec![
        Field::TunId,
        Field::TunSrc,
        Field::TunDst,
        Field::Metadata,
        Field::InPort,
        Field::VlanTci,
        Field::DlSrc,
        Field::DlDst,
    ];
    common.extend((0..8).map(Field::Reg));
    let mut v = Vec::new();
    let l4 = |v: &mut Vec<Field>, icmp: u8| match nw {
        Some(6) => v.extend([Field::TpSrc, Field::TpDst, Field::TcpFlags]),
        Some(17) | Some(132) => v.extend([Field::TpSrc, Field::TpDst]),
        Some(p) if p == icmp && icmp == 1 => v.extend([Field::IcmpType, Field::IcmpCode]),
        Some(p) if p == icmp => v.extend([
            Field::Icmpv6Type,
            Field::Icmpv6Code,
            Field::NdTarget,
            Field::NdSll,
            Field::NdTll,
        ]),
        _ => {}
    };
    match dl {
        Some(0x0800) => {
            v.extend([
                Field::NwSrc,
                Field::NwDst,
                Field::NwTos,
                Field::NwTtl,
                Field::NwFrag,
            ]);
            l4(&mut v, 1);
        }
        Some(0x86dd) => {
            v.extend([
                Field::Ipv6Src,
                Field::Ipv6Dst,
                Field::Ipv6Label,
                Field::NwTos,
                Field::NwTtl,
                Field::NwFrag,
            ]);
            l4(&mut v, 58);
        }
        Some(0x0806) => v.extend([Field::ArpSpa, Field::ArpTpa, Field::ArpSha, Field::ArpTha]),
        _ => {}
    }
    (common, v)
}

fn exact_only(f: Field) -> bool {
    matches!(
        f,
        Field::InPort
            | Field::DlType
            | Field::NwProto
            | Field::NwTtl
            | Field::ArpOp
            | Field::IcmpType
            | Field::IcmpCode
            | Field::Icmpv6Type
            | Field::Icmpv6Code
    )
}

/// A port number the parser can produce for `in_port`/`output`.
fn port_from(x: u32) -> u32 {
    match x % 4 {
        0 => 1 + (x >> 2) % 8,
        _ => 1 + x % ofp::MAX,
    }
}

/// A mask of `bits` bits chosen by `style` from `raw`.
fn mask_from(bits: u32, style: u8, raw: u128) -> u128 {
    match style % 4 {
        0 => full(bits),
        1 => raw & full(bits),
        2 => {
            let len = (raw % (u128::from(bits) + 1)) as u32;
            if len == 0 {
                0
            } else {
                full(bits) & !full(bits - len)
            }
        }
        _ => full(bits) & !(raw & 0xff),
    }
}

/// One field setting of a generated match.
type Setting = (usize, u128, u128, u8);

fn build_match(dl: Option<u16>, nw: Option<u8>, settings: &[Setting]) -> Match {
    let mut m = Match::catchall();
    if let Some(dl) = dl {
        m.set(Field::DlType, dl.into(), 0xffff);
    }
    if let Some(nw) = nw {
        m.set(Field::NwProto, nw.into(), 0xff);
    }
    let (common, specific) = candidates(dl, nw);
    for &(i, v, raw, style) in settings {
        // Half the settings go to protocol-specific fields when there are any.
        let f = if i & 1 == 1 && !specific.is_empty() {
            specific[(i >> 1) % specific.len()]
        } else {
            common[(i >> 1) % common.len()]
        };
        let (v, mask) = match f {
            Field::InPort => {
                let p = if style % 5 == 0 {
                    ofp::LOCAL
                } else {
                    port_from(v as u32)
                };
                (p.into(), full(32))
            }
            Field::NwTos => (v, [0xfc, 0x03, 0xff][usize::from(style % 3)]),
            _ if exact_only(f) => (v, f.full_mask()),
            _ => (v, mask_from(f.bits(), style, raw)),
        };
        m.set(f, v & mask, mask);
    }
    // The ND fields need an ND message of code 0 (`build_match`'s other
    // settings may have said otherwise): a solicitation carries `nd_sll`,
    // an advertisement `nd_tll`.
    let has = |m: &Match, f: Field| m.get(f).1 != 0;
    let icmp6 = dl == Some(0x86dd) && nw == Some(58);
    if icmp6 && (has(&m, Field::NdTarget) || has(&m, Field::NdSll) || has(&m, Field::NdTll)) {
        let (target_mask, tll) = (m.get(Field::NdTarget).1, has(&m, Field::NdTll));
        let ty = if has(&m, Field::NdSll) {
            if tll {
                m.clear(Field::NdTll);
            }
            135
        } else if tll {
            136
        } else {
            135 + (target_mask & 1)
        };
        m.set(Field::Icmpv6Type, ty, 0xff);
        if m.get(Field::Icmpv6Code).1 != 0 {
            m.set(Field::Icmpv6Code, 0, 0xff);
        }
    }
    m
}

/// What the rule's match must establish before an action may write `f`.
fn settable_under(f: Field, m: &Match) -> bool {
    let (k, mk): (&FlowKey, &FlowKey) = (m.key(), &m.mask().0);
    let need = match f {
        Field::NwSrc | Field::NwDst => Prereq::Ipv4,
        _ => f.prereq(),
    };
    f.settable() && need.satisfied(k, mk)
}

const SETTABLE: &[Field] = &[
    Field::InPort,
    Field::Metadata,
    Field::Reg(0),
    Field::Reg(5),
    Field::TunId,
    Field::TunSrc,
    Field::TunDst,
    Field::DlSrc,
    Field::DlDst,
    Field::VlanTci,
    Field::NwSrc,
    Field::NwDst,
    Field::NwTos,
    Field::NwTtl,
    Field::Ipv6Src,
    Field::Ipv6Dst,
    Field::Ipv6Label,
    Field::TpSrc,
    Field::TpDst,
    Field::ArpSpa,
    Field::ArpTpa,
    Field::ArpSha,
    Field::ArpTha,
    Field::IcmpType,
    Field::IcmpCode,
    Field::Icmpv6Type,
    Field::Icmpv6Code,
    Field::NdTarget,
    Field::NdSll,
    Field::NdTll,
];

/// One action seed: `(kind, a, b, c)`.
type Seed = (u8, u128, u128, u32);

fn build_actions(m: &Match, table: u8, seeds: &[Seed], goto: Option<u8>) -> Vec<Action> {
    let usable: Vec<Field> = SETTABLE
        .iter()
        .copied()
        .filter(|f| settable_under(*f, m))
        .collect();
    let mut out = Vec::new();
    for &(kind, a, b, c) in seeds {
        out.push(match kind % 16 {
            0 => Action::Output(port_from(c)),
            1 => Action::InPort,
            2 => Action::Normal,
            3 => Action::Flood,
            4 => Action::All,
            5 => Action::Local,
            6 => Action::Controller { max_len: a as u16 },
            7 => {
                let f = usable[c as usize % usable.len()];
                let (v, mask) = match f {
                    Field::InPort => (u128::from(port_from(a as u32)), full(32)),
                    Field::NwTos => (a, if c & 1 == 0 { 0xfc } else { 0x03 }),
                    _ => (a, mask_from(f.bits(), (c >> 8) as u8, b)),
                };
                Action::SetField {
                    field: f,
                    value: v & mask,
                    mask,
                }
            }
            8 => Action::PushVlan(if c & 1 == 0 { 0x8100 } else { 0x88a8 }),
            9 => Action::PopVlan,
            10 => Action::ModVlanVid((a % 4096) as u16),
            11 => Action::ModVlanPcp((a % 8) as u8),
            12 if c % 3 == 2 => learn_from(a, b, c),
            12 if c & 1 == 0 => Action::DecTtl,
            12 => Action::DecTtlIds((0..1 + a % 4).map(|i| (b >> (16 * i)) as u16).collect()),
            13 => Action::Enqueue {
                port: match c % 3 {
                    0 => ofp::LOCAL,
                    1 => ofp::IN_PORT,
                    _ => port_from(a as u32),
                },
                queue: b as u32,
            },
            14 => {
                let reg = Field::Reg((c % 16) as u8);
                let ofs = (a % 32) as u8;
                let nbits = 1 + (b % u128::from(32 - ofs)) as u8;
                Action::OutputReg {
                    field: reg,
                    ofs,
                    nbits,
                    max_len: u16::MAX,
                }
            }
            _ => {
                let port = (c % 3 != 0).then(|| port_from(a as u32));
                let table = if port.is_none() || c % 3 == 1 {
                    Some((b % 255) as u8)
                } else {
                    None
                };
                Action::Resubmit { port, table }
            }
        });
    }
    if let Some(&(_, a, b, c)) = seeds.first().filter(|s| s.0 % 5 == 0) {
        // An instruction: after every action but goto_table.
        let mask = if c & 1 == 0 { u64::MAX } else { b as u64 };
        out.push(Action::WriteMetadata {
            value: a as u64 & mask,
            mask,
        });
    }
    if let Some(g) = goto {
        if table < 254 {
            out.push(Action::GotoTable(table + 1 + g % (254 - table)));
        }
    }
    out
}

/// A `learn(...)` from the seeds: fields without prerequisites (so any
/// rule may learn them), matched from themselves or another field of the
/// same width, constants, loads, an output from register bits.
fn learn_from(a: u128, b: u128, c: u32) -> Action {
    use nicflow_flow::{LearnPart, LearnSpec, LearnSrc};
    const FREE: &[Field] = &[
        Field::Reg(0),
        Field::Reg(3),
        Field::Metadata,
        Field::DlSrc,
        Field::DlDst,
        Field::TunId,
        Field::VlanTci,
    ];
    let mut parts = Vec::new();
    for i in 0..(1 + c % 5) {
        let x = (a >> (8 * i)) as u32 ^ (b as u32).rotate_left(i);
        let f = FREE[x as usize % FREE.len()];
        let w = f.bits() as u8;
        let n = 1 + (x >> 8) as u8 % w;
        let ofs = (x >> 16) as u8 % (w - n + 1);
        let same = FREE
            .iter()
            .copied()
            .filter(|g| g.bits() == f.bits())
            .nth((x >> 24) as usize % 2)
            .unwrap_or(f);
        let v = b.rotate_left(i) & ((1u128 << n) - 1);
        parts.push(match (x >> 28) % 4 {
            0 => LearnPart::Match {
                dst: f,
                dst_ofs: ofs,
                n_bits: n,
                src: LearnSrc::Field { field: same, ofs },
            },
            1 => LearnPart::Match {
                dst: f,
                dst_ofs: 0,
                n_bits: w,
                src: LearnSrc::Imm(b.rotate_left(i) & f.full_mask()),
            },
            2 => LearnPart::Load {
                dst: f,
                dst_ofs: ofs,
                n_bits: n,
                src: if x & 1 == 0 {
                    LearnSrc::Imm(v)
                } else {
                    LearnSrc::Field { field: same, ofs }
                },
            },
            _ => LearnPart::Output {
                src: Field::Reg(1),
                ofs: (x % 17) as u8,
                n_bits: 16,
            },
        });
    }
    Action::Learn(Box::new(LearnSpec {
        table: (a % 255) as u8,
        idle_timeout: (b >> 32) as u16,
        hard_timeout: if c & 8 == 0 { 0 } else { (b >> 48) as u16 },
        fin_idle_timeout: if c & 16 == 0 { 0 } else { c as u16 },
        fin_hard_timeout: if c & 32 == 0 { 0 } else { (c >> 8) as u16 },
        priority: if c & 64 == 0 { 32768 } else { (a >> 64) as u16 },
        cookie: if c & 128 == 0 { 0 } else { (a >> 32) as u64 },
        send_flow_rem: c & 256 != 0,
        delete_learned: c & 512 != 0,
        parts,
    }))
}

prop_compose! {
    fn flow_spec()(
        (dl, nw) in proto(),
        settings in prop::collection::vec((any::<usize>(), any::<u128>(), any::<u128>(), any::<u8>()), 0..8),
        table in prop_oneof![Just(0u8), 0u8..=254],
        priority in prop_oneof![Just(32768u16), any::<u16>()],
        cookie in prop_oneof![Just(0u64), any::<u64>()],
        idle_timeout in prop_oneof![Just(0u16), any::<u16>()],
        hard_timeout in prop_oneof![Just(0u16), any::<u16>()],
        seeds in prop::collection::vec((any::<u8>(), any::<u128>(), any::<u128>(), any::<u32>()), 0..6),
        goto in prop::option::of(any::<u8>()),
        send_flow_rem in any::<bool>(),
    ) -> FlowSpec {
        let r#match = build_match(dl, nw, &settings);
        let actions = build_actions(&r#match, table, &seeds, goto);
        FlowSpec { table, priority, cookie, idle_timeout, hard_timeout, send_flow_rem, r#match, actions }
    }
}

fn named() -> NamedPorts {
    // Some names print, some cannot (reserved word, leading digit, bad
    // character, second name for a number): those print as numbers.
    [
        ("eth1", 1),
        ("br-int.2", 2),
        ("normal", 3),
        ("4x", 4),
        ("a,b", 5),
        ("six", 6),
        ("seis", 6),
        ("uplink", 0xffff_ff00),
    ]
    .into_iter()
    .collect()
}

fn check_roundtrip(f: &FlowSpec, ports: &dyn PortMap) -> Result<(), TestCaseError> {
    let text = format_flow(f, ports);
    let back = parse_flow(&text, ports);
    prop_assert_eq!(back.as_ref(), Ok(f), "printed as {}", text);
    prop_assert_eq!(format_flow(&back.unwrap(), ports), text);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn valid_specs_roundtrip(f in flow_spec()) {
        check_roundtrip(&f, &NumericPorts)?;
        check_roundtrip(&f, &named())?;
    }

    #[test]
    fn valid_match_specs_roundtrip(
        f in flow_spec(),
        table in prop::option::of(0u8..=254),
        priority in prop::option::of(any::<u16>()),
        cookie in prop::option::of((any::<u64>(), prop_oneof![Just(u64::MAX), any::<u64>()])),
    ) {
        let s = MatchSpec {
            table,
            priority,
            cookie: cookie.map(|(c, m)| (c & m, m)),
            r#match: f.r#match,
        };
        for ports in [&NumericPorts as &dyn PortMap, &named()] {
            let text = format_match_spec(&s, ports);
            prop_assert_eq!(parse_match(&text, ports), Ok(s.clone()), "printed as {}", text);
        }
    }

    /// Printed valid rules, then mutated, must never panic, and whatever
    /// still parses must round-trip.
    #[test]
    fn mutated_printed_specs(f in flow_spec(), muts in prop::collection::vec(mutation(), 1..4)) {
        let text = format_flow(&f, &NumericPorts);
        nicflow_ofctl::fuzz_rule(mutate(&text, &muts).as_bytes());
    }
}

// ----------------------------------------------------- text-level checks

/// Hand-written rules, all valid.
const CORPUS: &[&str] = &[
    "actions=drop",
    "priority=0 actions=normal",
    "table=0,priority=65535,cookie=0xdeadbeef,idle_timeout=60,hard_timeout=3600 actions=controller",
    "tcp,tp_dst=80 actions=output:1",
    "tp_dst=80,tcp actions=1,2,3",
    "udp6,tp_dst=53,ipv6_dst=2001:db8::/32 actions=output:eth0",
    "ip,nw_src=10.0.0.0/8,nw_dst=192.168.1.1 actions=mod_nw_dst:10.0.0.1,dec_ttl,output:2",
    "ip nw_src=10.1.2.3/255.0.255.0 actions=drop",
    "arp,nw_src=10.0.0.1,arp_op=1 actions=flood",
    "arp,arp_spa=10.0.0.0/24,arp_tpa=10.0.0.1,arp_sha=00:11:22:33:44:55,arp_tha=00:00:00:00:00:00/ff:ff:ff:00:00:00 actions=local",
    "arp,nw_proto=2 actions=LOCAL",
    "in_port=1,dl_src=00:11:22:33:44:55,dl_dst=01:00:00:00:00:00/01:00:00:00:00:00 actions=in_port",
    "in_port=LOCAL actions=all",
    "dl_vlan=5 actions=strip_vlan,output:3",
    "dl_vlan=0xffff actions=push_vlan:0x8100,mod_vlan_vid:10,mod_vlan_pcp:3,output:4",
    "dl_vlan=5,dl_vlan_pcp=3 actions=pop_vlan",
    "vlan_tci=0x1000/0x1000 actions=drop",
    "dl_type=0x88cc actions=controller:128",
    "ip,nw_tos=16 actions=mod_nw_tos:32",
    "ip,ip_dscp=46,nw_ecn=1 actions=set_field:10->ip_dscp",
    "ipv6,nw_ecn=3,nw_ttl=1 actions=set_field:2->nw_ecn",
    "ip,ip_frag=first actions=drop",
    "ip,ip_frag=not_later actions=drop",
    "ip,ip_frag=no,nw_frag=0/2 actions=drop",
    "tcp,tcp_flags=+syn-ack actions=controller(max_len=64)",
    "tcp6,tcp_flags=0x012/0x0fff actions=drop",
    "icmp,icmp_type=8,icmp_code=0 actions=resubmit(,2)",
    "icmp6,icmpv6_type=135 actions=resubmit:3",
    "metadata=0x5/0xff,reg0=1,reg7=0xffffffff,tun_id=0x10,tun_src=192.0.2.1,tun_dst=192.0.2.0/24 actions=resubmit(4,5)",
    "table=1 actions=goto_table:2",
    "table=1 tcp actions=set_field:80->tcp_dst,set_field:00:11:22:33:44:55->eth_src,goto_table:5",
    "ip actions=set_field:10.0.0.0/8->ip_src,load:5->NXM_NX_REG0[],load:1->NXM_NX_REG1[0..3]",
    "udp actions=set_field:0x50/0xf0->udp_dst,mod_tp_src:1",
    "sctp,tp_src=0x50/0xfff0 actions=set_field:5->vlan_vid,set_field:0x1006->vlan_vid",
    "in_port=eth1,ip actions=output:eth2,output:eth1,eth2",
    "ipv6,ipv6_label=0x12345/0xfffff,ipv6_src=::1 actions=set_field:2001:db8::1->ipv6_dst",
    "cookie=5 actions=set_field:eth9->in_port",
    "actions=controller(),CONTROLLER:0,output:controller",
];

#[test]
fn corpus_roundtrips() {
    for t in CORPUS {
        let ports = AutoPorts::new();
        let f = parse_flow(t, &ports).unwrap_or_else(|e| panic!("{t}: {e}"));
        let s = format_flow(&f, &ports);
        assert_eq!(parse_flow(&s, &ports), Ok(f), "{t} printed as {s}");
        nicflow_ofctl::fuzz_rule(t.as_bytes());
    }
    let all = CORPUS.join("\n# comment\n\n");
    assert_eq!(
        parse_flows(&all, &AutoPorts::new()).unwrap().len(),
        CORPUS.len()
    );
}

/// Bits of rule syntax to splice into mutated text.
const SNIPPETS: &[&str] = &[
    ",",
    " ",
    "=",
    "/",
    ":",
    "(",
    ")",
    "[",
    "]",
    "->",
    "..",
    "+",
    "-",
    "0",
    "1",
    "0x",
    "ff",
    "255",
    "65535",
    "65536",
    "4095",
    "4294967040",
    "ip",
    "ipv6",
    "arp",
    "tcp",
    "udp6",
    "icmp",
    "icmp6",
    "tp_dst=",
    "tp_src=",
    "nw_src=",
    "nw_proto=",
    "arp_op=",
    "dl_vlan=",
    "vlan_tci=",
    "nw_tos=",
    "ip_frag=",
    "tcp_flags=",
    "+syn",
    "-ack",
    "in_port=",
    "LOCAL",
    "eth0",
    "actions=",
    "drop",
    "output:",
    "normal",
    "goto_table:",
    "resubmit(",
    "set_field:",
    "->reg0",
    "->ip_dscp",
    "->vlan_vid",
    "load:",
    "->NXM_NX_REG0[",
    "controller(",
    "max_len=",
    "table=",
    "priority=",
    "cookie=",
    "10.0.0.1/24",
    "::1/64",
    "00:11:22:33:44:55",
    "\u{e9}",
    "\n",
    "#",
];

#[derive(Clone, Debug)]
enum Mutation {
    Delete(usize, usize),
    Insert(usize, usize),
    Replace(usize, char),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..8).prop_map(|(a, b)| Mutation::Delete(a, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Insert(a, b)),
        (any::<usize>(), any::<char>()).prop_map(|(a, c)| Mutation::Replace(a, c)),
    ]
}

fn mutate(text: &str, muts: &[Mutation]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for m in muts {
        let at = |x: usize, len: usize| if len == 0 { 0 } else { x % (len + 1) };
        match *m {
            Mutation::Delete(a, n) => {
                let s = at(a, chars.len()).min(chars.len());
                let e = (s + n).min(chars.len());
                chars.drain(s..e);
            }
            Mutation::Insert(a, k) => {
                let s = at(a, chars.len());
                let snip = SNIPPETS[k % SNIPPETS.len()];
                for (i, c) in snip.chars().enumerate() {
                    chars.insert(s + i, c);
                }
            }
            Mutation::Replace(a, c) => {
                if !chars.is_empty() {
                    let i = a % chars.len();
                    chars[i] = c;
                }
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Corpus rules with random edits: never panic; what parses round-trips.
    #[test]
    fn mutated_corpus(i in any::<usize>(), muts in prop::collection::vec(mutation(), 1..5)) {
        let text = mutate(CORPUS[i % CORPUS.len()], &muts);
        nicflow_ofctl::fuzz_rule(text.as_bytes());
    }

    /// Arbitrary printable text.
    #[test]
    fn random_text(s in "\\PC{0,80}") {
        nicflow_ofctl::fuzz_rule(s.as_bytes());
    }

    /// Text over the rule alphabet, which is far more likely to parse.
    #[test]
    fn random_rule_alphabet(s in "[a-z_0-9=,:/ ()x.>+-]{0,60}( actions=[a-z_0-9=,:/ ()x.>\\[\\]-]{0,40})?") {
        nicflow_ofctl::fuzz_rule(s.as_bytes());
    }

    /// Arbitrary bytes (lossy UTF-8).
    #[test]
    fn random_bytes(b in prop::collection::vec(any::<u8>(), 0..100)) {
        nicflow_ofctl::fuzz_rule(&b);
    }
}
