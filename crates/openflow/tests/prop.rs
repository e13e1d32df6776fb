//! Property tests: generated messages survive encode → decode unchanged
//! (and re-encode to the same bytes); arbitrary, truncated and oversized
//! bytes never make the decoder panic.

mod common;

use common::{hex, MESSAGES, OVS_OFCTL_FLOW_MODS};
use nicflow_flow::Match;
use nicflow_openflow::action::{self, Instruction, NxCt, NxNat, OfAction};
use nicflow_openflow::msg::multipart::*;
use nicflow_openflow::msg::*;
use nicflow_openflow::oxm::{self, OxmEntry, OxmField};
use nicflow_openflow::DecodeError;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn ones(bytes: u8) -> u128 {
    if bytes >= 16 {
        u128::MAX
    } else {
        (1u128 << (u32::from(bytes) * 8)) - 1
    }
}

fn all_fields() -> Vec<OxmField> {
    OxmField::all().collect()
}

/// A well-formed TLV of any field nicflow knows (value in range, value
/// bits only under the mask).
fn entry(allow_mask: bool) -> impl Strategy<Value = OxmEntry> {
    let n = all_fields().len();
    (0..n, any::<u128>(), any::<u128>(), any::<bool>()).prop_map(move |(i, v, m, masked)| {
        let field = all_fields()[i];
        let d = field.def();
        let v = v & d.valid;
        let mask = (allow_mask && masked && d.maskable).then_some(m & ones(d.bytes));
        OxmEntry {
            field,
            value: mask.map_or(v, |m| v & m),
            mask,
        }
    })
}

/// A match built the way a controller would: protocol fields first, then
/// random fields; entries OpenFlow would refuse are skipped.
fn a_match() -> impl Strategy<Value = Match> {
    (
        prop::sample::select(vec![None, Some(0x0800u16), Some(0x86dd), Some(0x0806)]),
        prop::sample::select(vec![
            None,
            Some(6u8),
            Some(17),
            Some(132),
            Some(1),
            Some(58),
        ]),
        any::<bool>(),
        prop::collection::vec(entry(true), 0..10),
    )
        .prop_map(|(dl, proto, ct, entries)| {
            let mut m = Match::catchall();
            let mut apply = |f, v, mask| {
                let _ = oxm::apply_entry(
                    &mut m,
                    OxmEntry {
                        field: f,
                        value: v,
                        mask,
                    },
                );
            };
            if let Some(dl) = dl {
                apply(OxmField::EthType, dl.into(), None);
            }
            if let Some(p) = proto {
                apply(OxmField::IpProto, p.into(), None);
            }
            if ct {
                apply(OxmField::CtState, 0x22, Some(0x22));
            }
            for e in entries {
                apply(e.field, e.value, e.mask);
            }
            oxm::normalize(&mut m);
            m
        })
}

fn field_of_width(min_bits: u32) -> impl Strategy<Value = OxmField> {
    let fields: Vec<_> = all_fields()
        .into_iter()
        .filter(|f| f.wire_bits() >= min_bits)
        .collect();
    prop::sample::select(fields)
}

/// `(field, ofs, n_bits)` with the bits inside the field, `n_bits <= max`.
fn subfield(max: u32) -> impl Strategy<Value = (OxmField, u16, u32)> {
    field_of_width(1).prop_flat_map(move |f| {
        let w = f.wire_bits();
        (Just(f), 1..=w.min(max))
            .prop_flat_map(move |(f, n)| (Just(f), 0..=(w - n) as u16, Just(n)))
    })
}

/// `NXAST_LEARN` with specs of every kind (fields within their widths).
fn learn() -> impl Strategy<Value = OfAction> {
    use nicflow_openflow::action::nx::{NxLearn, NxLearnDst, NxLearnSpec, NxLearnSrc};
    let spec = (
        subfield(128),
        any::<u128>(),
        0u8..3,
        any::<bool>(),
        field_of_width(1),
    )
        .prop_flat_map(|((df, dofs, n), v, kind, imm, sf)| {
            let sw = sf.wire_bits();
            let n = n.min(sw);
            (0..=(sw - n) as u16).prop_map(move |sofs| {
                let src = if imm && kind != 2 {
                    NxLearnSrc::Imm(if n == 128 { v } else { v & ((1u128 << n) - 1) })
                } else {
                    NxLearnSrc::Field(sf, sofs)
                };
                let dst = match kind {
                    0 => NxLearnDst::Match(df, dofs.min((df.wire_bits() - n) as u16)),
                    1 => NxLearnDst::Load(df, dofs.min((df.wire_bits() - n) as u16)),
                    _ => NxLearnDst::Output,
                };
                NxLearnSpec {
                    n_bits: n as u16,
                    src,
                    dst,
                }
            })
        });
    (
        any::<(u16, u16, u16, u64)>(),
        0u16..4,
        0u8..255,
        any::<(u16, u16)>(),
        prop::collection::vec(spec, 0..5),
    )
        .prop_map(
            |((idle, hard, prio, cookie), flags, table, (fi, fh), specs)| {
                OfAction::Learn(Box::new(NxLearn {
                    idle_timeout: idle,
                    hard_timeout: hard,
                    priority: prio,
                    cookie,
                    flags,
                    table_id: table,
                    fin_idle_timeout: fi,
                    fin_hard_timeout: fh,
                    specs,
                }))
            },
        )
}

fn nat() -> impl Strategy<Value = NxNat> {
    let flags = prop::sample::select(vec![0u16, 1, 2, 1 | 4, 2 | 8, 1 | 16, 2 | 4 | 16]);
    let v4 = (1..=u32::MAX, any::<Option<u32>>())
        .prop_map(|(a, b)| {
            let a = Ipv4Addr::from(a);
            (
                IpAddr::V4(a),
                b.map(|b| IpAddr::V4(Ipv4Addr::from(b.max(a.into())))),
            )
        })
        .boxed();
    let v6 = (1..=u128::MAX, any::<Option<u128>>())
        .prop_map(|(a, b)| {
            let a = Ipv6Addr::from(a);
            (
                IpAddr::V6(a),
                b.map(|b| IpAddr::V6(Ipv6Addr::from(b.max(a.into())))),
            )
        })
        .boxed();
    (
        flags,
        prop::option::of(prop_oneof![v4, v6]),
        any::<Option<(u16, Option<u16>)>>(),
    )
        .prop_map(|(flags, addr, ports)| {
            let ports = addr.and(ports);
            NxNat {
                flags,
                addr_min: addr.map(|a| a.0),
                addr_max: addr.and_then(|a| a.1),
                proto_min: ports.map(|p| p.0),
                proto_max: ports.and_then(|p| p.1.map(|m| m.max(p.0))),
            }
        })
}

fn ct_nested() -> impl Strategy<Value = OfAction> {
    let mark_or_label = prop::sample::select(vec![OxmField::CtMark, OxmField::CtLabel]);
    prop_oneof![
        nat().prop_map(OfAction::Nat),
        (mark_or_label.clone(), any::<u128>()).prop_map(|(f, v)| OfAction::SetField(OxmEntry {
            field: f,
            value: v & ones(f.def().bytes),
            mask: None
        })),
        (mark_or_label, 1..=32u8, any::<u16>(), any::<u64>()).prop_map(|(f, n, ofs, v)| {
            let room = f.wire_bits() as u16 - u16::from(n);
            OfAction::RegLoad {
                dst: f,
                ofs: ofs % (room + 1),
                n_bits: n,
                value: v & ((1u64 << n) - 1),
            }
        }),
    ]
}

fn of_action() -> impl Strategy<Value = OfAction> {
    let set_field = entry(false).prop_filter_map("not settable by set_field", |mut e| {
        if e.field == OxmField::InPort {
            return None;
        }
        if e.field == OxmField::VlanVid {
            e.value |= 0x1000;
        }
        Some(OfAction::SetField(e))
    });
    let zone = prop_oneof![
        any::<u16>().prop_map(|z| (None, z)),
        field_of_width(16).prop_flat_map(|f| (0..=(f.wire_bits() - 16) as u16)
            .prop_map(move |ofs| (Some(f), action::nx::ofs_nbits(ofs, 16)))),
    ];
    let ct = (
        prop::sample::select(vec![0u16, 1, 3]),
        zone,
        any::<u8>(),
        any::<u16>(),
        prop::collection::vec(ct_nested(), 0..3),
    )
        .prop_map(|(flags, (zone_src, zone), recirc_table, alg, actions)| {
            OfAction::Ct(NxCt {
                flags,
                zone_src,
                zone,
                recirc_table,
                alg,
                actions,
            })
        });
    prop_oneof![
        (any::<u32>(), any::<u16>()).prop_map(|(port, max_len)| OfAction::Output { port, max_len }),
        any::<u32>().prop_map(OfAction::Group),
        set_field,
        any::<u16>().prop_map(OfAction::PushVlan),
        Just(OfAction::PopVlan),
        any::<u8>().prop_map(OfAction::SetNwTtl),
        Just(OfAction::DecNwTtl),
        prop::collection::vec(any::<u16>(), 0..9).prop_map(OfAction::DecTtlCntIds),
        learn(),
        (any::<u16>(), any::<Option<u8>>())
            .prop_map(|(in_port, table)| OfAction::Resubmit { in_port, table }),
        (subfield(128), field_of_width(1)).prop_flat_map(|((src, src_ofs, n), dst)| {
            let w = dst.wire_bits();
            let n = n.min(w);
            (0..=(w - n) as u16).prop_map(move |dst_ofs| OfAction::RegMove {
                src,
                src_ofs,
                dst,
                dst_ofs,
                n_bits: n as u16,
            })
        }),
        (subfield(64), any::<u64>()).prop_map(|((dst, ofs, n), v)| OfAction::RegLoad {
            dst,
            ofs,
            n_bits: n as u8,
            value: if n == 64 { v } else { v & ((1u64 << n) - 1) },
        }),
        entry(true).prop_map(OfAction::RegLoad2),
        (subfield(64), any::<u16>()).prop_map(|((src, ofs, n), max_len)| OfAction::OutputReg {
            src,
            ofs,
            n_bits: n as u8,
            max_len
        }),
        (any::<u16>(), any::<u16>(), any::<u8>()).prop_map(|(max_len, controller_id, reason)| {
            OfAction::Controller {
                max_len,
                controller_id,
                reason,
            }
        }),
        ct,
        Just(OfAction::CtClear),
    ]
}

fn actions() -> impl Strategy<Value = Vec<OfAction>> {
    prop::collection::vec(of_action(), 0..5)
}

fn instructions() -> impl Strategy<Value = Vec<Instruction>> {
    let inst = prop_oneof![
        any::<u8>().prop_map(Instruction::GotoTable),
        (any::<u64>(), any::<u64>())
            .prop_map(|(metadata, mask)| Instruction::WriteMetadata { metadata, mask }),
        actions().prop_map(Instruction::WriteActions),
        actions().prop_map(Instruction::ApplyActions),
        Just(Instruction::ClearActions),
        any::<u32>().prop_map(Instruction::Meter),
    ];
    prop::collection::vec(inst, 0..4)
}

fn flow_mod() -> impl Strategy<Value = FlowMod> {
    (
        (any::<u64>(), any::<u64>(), 0..255u8, 0..5u8),
        (any::<u16>(), any::<u16>(), any::<u16>(), any::<u32>()),
        (any::<u32>(), any::<u32>(), 0..32u16),
        a_match(),
        instructions(),
    )
        .prop_map(
            |(
                (cookie, cookie_mask, table_id, cmd),
                (idle, hard, prio, buf),
                (op, og, flags),
                m,
                i,
            )| {
                FlowMod {
                    cookie,
                    cookie_mask,
                    table_id,
                    command: FlowModCommand::from_u8(cmd).unwrap(),
                    idle_timeout: idle,
                    hard_timeout: hard,
                    priority: prio,
                    buffer_id: buf,
                    out_port: op,
                    out_group: og,
                    flags,
                    importance: 0,
                    r#match: m,
                    instructions: i,
                }
            },
        )
}

fn bucket() -> impl Strategy<Value = Bucket> {
    (any::<u16>(), any::<u32>(), any::<u32>(), actions()).prop_map(|(weight, wp, wg, actions)| {
        Bucket {
            bucket_id: 0,
            weight,
            watch_port: wp,
            watch_group: wg,
            actions,
        }
    })
}

/// Buckets numbered by position, as 1.3 (which has no bucket ids) reads
/// them back.
fn numbered(mut v: Vec<Bucket>) -> Vec<Bucket> {
    for (i, b) in v.iter_mut().enumerate() {
        b.bucket_id = i as u32;
    }
    v
}

fn band() -> impl Strategy<Value = MeterBand> {
    use nicflow_openflow::msg::meter::BandKind;
    let kind = prop_oneof![
        Just(BandKind::Drop),
        any::<u8>().prop_map(|prec_level| BandKind::DscpRemark { prec_level }),
        (
            any::<u32>(),
            prop::collection::vec(any::<u8>(), 0..3).prop_map(|v| v.repeat(8))
        )
            .prop_map(|(experimenter, data)| BandKind::Experimenter { experimenter, data }),
    ];
    (any::<u32>(), any::<u32>(), kind).prop_map(|(rate, burst_size, kind)| MeterBand {
        rate,
        burst_size,
        kind,
    })
}

fn port() -> impl Strategy<Value = Port> {
    (
        any::<u32>(),
        any::<[u8; 6]>(),
        "[a-z0-9]{0,15}",
        any::<[u32; 8]>(),
    )
        .prop_map(|(port_no, hw_addr, name, v)| Port {
            port_no,
            hw_addr,
            name,
            config: v[0],
            state: v[1],
            curr: v[2],
            advertised: v[3],
            supported: v[4],
            peer: v[5],
            curr_speed: v[6],
            max_speed: v[7],
        })
}

fn meter_flags() -> impl Strategy<Value = u16> {
    prop::sample::select(vec![0u16, 1, 2, 5, 6, 9, 13, 14])
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..40).prop_map(Message::EchoRequest),
        prop::collection::vec(any::<u8>(), 0..40).prop_map(Message::EchoReply),
        (
            any::<u16>(),
            any::<u16>(),
            prop::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(t, c, data)| Message::Error(ErrorMsg {
                version: 4,
                error: nicflow_openflow::OfpError::from_type_code(t, c),
                data
            })),
        flow_mod().prop_map(Message::FlowMod),
        (
            any::<u32>(),
            any::<u16>(),
            any::<u8>(),
            any::<u8>(),
            any::<u64>(),
            a_match()
        )
            .prop_flat_map(
                |(b, tl, r, t, c, m)| prop::collection::vec(any::<u8>(), 0..80).prop_map(
                    move |data| Message::PacketIn(PacketIn {
                        buffer_id: b,
                        total_len: tl,
                        reason: r,
                        table_id: t,
                        cookie: c,
                        r#match: m,
                        data
                    })
                )
            ),
        (
            any::<(u64, u16, u8, u8, u32, u32, u16, u16, u64, u64)>(),
            a_match()
        )
            .prop_map(
                |((c, p, r, t, ds, dn, it, ht, pc, bc), m)| Message::FlowRemoved(FlowRemoved {
                    cookie: c,
                    priority: p,
                    reason: r,
                    table_id: t,
                    duration_sec: ds,
                    duration_nsec: dn,
                    idle_timeout: it,
                    hard_timeout: ht,
                    packet_count: pc,
                    byte_count: bc,
                    r#match: m
                })
            ),
        (
            any::<u32>(),
            any::<u32>(),
            actions(),
            prop::collection::vec(any::<u8>(), 0..60)
        )
            .prop_map(|(buffer_id, in_port, actions, data)| Message::PacketOut(
                PacketOut {
                    buffer_id,
                    in_port,
                    metadata: Match::catchall(),
                    actions,
                    data
                }
            )),
        (
            0..3u16,
            0..4u8,
            any::<u32>(),
            prop::collection::vec(bucket(), 0..3)
        )
            .prop_map(
                |(command, group_type, group_id, buckets)| Message::GroupMod(GroupMod {
                    command,
                    group_type,
                    group_id,
                    command_bucket_id: group::bucket_id::ALL,
                    buckets: numbered(buckets),
                    selection_method: None,
                })
            ),
        (
            0..3u16,
            meter_flags(),
            any::<u32>(),
            prop::collection::vec(band(), 0..3)
        )
            .prop_map(
                |(command, flags, meter_id, bands)| Message::MeterMod(MeterMod {
                    command,
                    flags,
                    meter_id,
                    bands
                })
            ),
        (any::<u8>(), port())
            .prop_map(|(reason, desc)| Message::PortStatus(PortStatus { reason, desc })),
        (any::<u32>(), any::<u64>()).prop_map(|(role, generation_id)| Message::RoleRequest(Role {
            role,
            generation_id
        })),
        any::<[u32; 6]>().prop_map(|v| Message::SetAsync(AsyncConfig {
            packet_in_mask: [v[0], v[1]],
            port_status_mask: [v[2], v[3]],
            flow_removed_mask: [v[4], v[5]],
        })),
        multipart_request().prop_map(Message::MultipartRequest),
        multipart_reply().prop_map(Message::MultipartReply),
        Just(Message::BarrierRequest),
        Just(Message::GetAsyncRequest),
        Just(Message::FeaturesRequest),
    ]
}

fn multipart_request() -> impl Strategy<Value = MultipartRequest> {
    let fsr = (
        any::<u8>(),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        a_match(),
    )
        .prop_map(
            |(table_id, out_port, out_group, cookie, cookie_mask, m)| FlowStatsRequest {
                table_id,
                out_port,
                out_group,
                cookie,
                cookie_mask,
                r#match: m,
            },
        )
        .boxed();
    let body = prop_oneof![
        Just(RequestBody::Desc),
        fsr.clone().prop_map(RequestBody::Flow),
        fsr.prop_map(RequestBody::Aggregate),
        any::<u32>().prop_map(|port_no| RequestBody::PortStats { port_no }),
        any::<u32>().prop_map(|group_id| RequestBody::Group { group_id }),
        any::<u32>().prop_map(|meter_id| RequestBody::MeterConfig { meter_id }),
        Just(RequestBody::TableFeatures(vec![])),
        (0..10u8).prop_map(|t| RequestBody::TableFeatures(vec![TableFeatures::nicflow(t, 10, 5)])),
    ];
    (0..2u16, body).prop_map(|(flags, body)| MultipartRequest { flags, body })
}

fn multipart_reply() -> impl Strategy<Value = MultipartReply> {
    let flow_stats = (
        any::<(u8, u32, u32, u16, u16, u16, u16, u64, u64, u64)>(),
        a_match(),
        instructions(),
    )
        .prop_map(|((t, ds, dn, p, it, ht, f, c, pc, bc), m, i)| FlowStats {
            table_id: t,
            duration_sec: ds,
            duration_nsec: dn,
            priority: p,
            idle_timeout: it,
            hard_timeout: ht,
            flags: f,
            cookie: c,
            packet_count: pc,
            byte_count: bc,
            r#match: m,
            instructions: i,
        });
    let body = prop_oneof![
        prop::collection::vec(flow_stats, 0..3).prop_map(ReplyBody::Flow),
        prop::collection::vec(port(), 0..3).prop_map(ReplyBody::PortDesc),
        (0..4u8, any::<u32>(), prop::collection::vec(bucket(), 0..3)).prop_map(
            |(group_type, group_id, buckets)| {
                ReplyBody::GroupDesc(vec![GroupDesc {
                    group_type,
                    group_id,
                    buckets: numbered(buckets),
                    selection_method: None,
                }])
            }
        ),
        (
            meter_flags(),
            any::<u32>(),
            prop::collection::vec(band(), 0..3)
        )
            .prop_map(|(flags, meter_id, bands)| {
                ReplyBody::MeterConfig(vec![MeterConfig {
                    flags,
                    meter_id,
                    bands,
                }])
            }),
        (
            any::<u32>(),
            prop::collection::vec(any::<(u64, u64)>(), 0..3)
        )
            .prop_map(|(meter_id, band_stats)| {
                ReplyBody::Meter(vec![MeterStats {
                    meter_id,
                    band_stats,
                    ..MeterStats::default()
                }])
            }),
        (
            any::<u32>(),
            prop::collection::vec(any::<(u64, u64)>(), 0..3)
        )
            .prop_map(|(group_id, bucket_stats)| {
                ReplyBody::Group(vec![GroupStats {
                    group_id,
                    bucket_stats,
                    ..GroupStats::default()
                }])
            }),
        "[ -~]{0,20}".prop_map(|s| ReplyBody::Desc(Desc {
            mfr_desc: s.clone(),
            hw_desc: s.clone(),
            sw_desc: s.clone(),
            serial_num: s.chars().take(20).collect(),
            dp_desc: s,
        })),
        (0..254u8)
            .prop_map(|t| ReplyBody::TableFeatures(vec![TableFeatures::nicflow(t, 254, 1000)])),
    ];
    (0..2u16, body).prop_map(|(flags, body)| MultipartReply { flags, body })
}

/// Decoding must never panic; whatever decodes must encode and decode back
/// to the same value.
fn check_bytes(b: &[u8]) {
    if let Ok((d, n)) = decode(b) {
        assert!(n <= b.len());
        let again = nicflow_openflow::msg::encode_to_vec_as(&d.message, d.version, d.xid).unwrap();
        let (d2, _) = decode(&again).unwrap();
        if d.version >= OFP15_VERSION {
            // A Nicira load read in 1.5 goes back out as a set-field.
            assert_eq!(d2.message, meter15(&d.message));
        } else {
            assert_eq!(d2.message, d.message);
        }
    }
}

/// `m` as 1.5 has it: a meter is an action, not an instruction
/// (`action::meter_as_action`), and loads are set-fields in flows and
/// group buckets (`action::as_of15`).
fn meter15(m: &Message) -> Message {
    use nicflow_openflow::action::{as_of15, instructions_as_of15, meter_as_action};
    use nicflow_openflow::msg::multipart::ReplyBody;
    let mut m = m.clone();
    match &mut m {
        Message::FlowMod(f) => {
            f.instructions = instructions_as_of15(&meter_as_action(&f.instructions))
        }
        Message::GroupMod(g) => {
            for b in &mut g.buckets {
                b.actions = as_of15(&b.actions);
            }
        }
        Message::MultipartReply(r) => match &mut r.body {
            ReplyBody::Flow(fs) => {
                for f in fs {
                    f.instructions = instructions_as_of15(&meter_as_action(&f.instructions));
                }
            }
            ReplyBody::GroupDesc(gs) => {
                for g in gs {
                    for b in &mut g.buckets {
                        b.actions = as_of15(&b.actions);
                    }
                }
            }
            _ => {}
        },
        _ => {}
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn messages_round_trip(m in message(), xid in any::<u32>()) {
        let b = nicflow_openflow::msg::encode_to_vec(&m, xid).unwrap();
        let (d, n) = decode(&b).unwrap_or_else(|e| panic!("{m:?}: {e}"));
        prop_assert_eq!(n, b.len());
        prop_assert_eq!(d.xid, xid);
        prop_assert_eq!(&d.message, &m);
        prop_assert_eq!(nicflow_openflow::msg::encode_to_vec(&d.message, xid).unwrap(), b);
        // Every 1.3 message is also a 1.5 message, with 1.5's layout.
        let b15 = nicflow_openflow::msg::encode_to_vec_as(&m, OFP15_VERSION, xid).unwrap();
        let (d15, n15) = decode(&b15).unwrap_or_else(|e| panic!("1.5 {m:?}: {e}"));
        prop_assert_eq!(n15, b15.len());
        prop_assert_eq!(&d15.message, &meter15(&m));
        prop_assert_eq!(
            nicflow_openflow::msg::encode_to_vec_as(&d15.message, OFP15_VERSION, xid).unwrap(),
            b15
        );
    }

    #[test]
    fn matches_round_trip(m in a_match()) {
        let mut b = Vec::new();
        oxm::encode_fields(&m, &mut b);
        let back = oxm::decode_fields(&b).unwrap();
        prop_assert_eq!(back, m);
    }

    #[test]
    fn random_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..300)) {
        check_bytes(&b);
        let _ = oxm::decode_fields(&b);
        let _ = action::decode_actions(&b);
        let _ = action::decode_instructions(&b);
    }

    #[test]
    fn random_bodies_never_panic(
        ty in 0..36u8,
        version in prop::sample::select(vec![1u8, 4, 4, 4, 6]),
        body in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut b = vec![version, ty, 0, 0, 0, 0, 0, 1];
        b.extend_from_slice(&body);
        let len = b.len() as u16;
        b[2..4].copy_from_slice(&len.to_be_bytes());
        check_bytes(&b);
    }

    #[test]
    fn random_tlvs_never_panic(entries in prop::collection::vec(entry(true), 0..6), junk in any::<u8>()) {
        // Well-formed TLVs in random order (prerequisites, duplicates), then
        // a flipped byte somewhere.
        let mut b = Vec::new();
        for e in &entries {
            oxm::write_entry(&mut b, e.field, false, e.value, e.mask);
        }
        let _ = oxm::decode_fields(&b);
        if !b.is_empty() {
            let i = usize::from(junk) % b.len();
            b[i] ^= junk | 1;
            let _ = oxm::decode_fields(&b);
        }
    }

    #[test]
    fn corrupted_vectors_never_panic(i in 0..MESSAGES.len(), at in any::<usize>(), x in 1..=255u8) {
        let mut b = hex(MESSAGES[i].1);
        let at = at % b.len();
        b[at] ^= x;
        check_bytes(&b);
    }
}

/// Every golden vector, cut short at every length: framing says "need more"
/// and never panics; with the header's length patched to the cut (a peer
/// that lies about structure sizes) and with junk appended, decoding returns
/// an error or a message, never a panic.
#[test]
fn truncated_and_oversized_vectors() {
    let all = MESSAGES
        .iter()
        .map(|(_, h)| *h)
        .chain(OVS_OFCTL_FLOW_MODS.iter().map(|(_, h)| *h));
    for h in all {
        let full = hex(h);
        for cut in 0..full.len() {
            let prefix = &full[..cut];
            match decode(prefix) {
                Err(DecodeError::Incomplete { needed }) => assert!(needed > 0),
                other => panic!("{h} cut at {cut}: {other:?}"),
            }
            if cut >= 8 {
                let mut lying = prefix.to_vec();
                lying[2..4].copy_from_slice(&(cut as u16).to_be_bytes());
                check_bytes(&lying);
            }
        }
        for extra in [1usize, 7, 8, 64] {
            let mut big = full.clone();
            big.extend(std::iter::repeat_n(0xa5, extra));
            let len = big.len() as u16;
            big[2..4].copy_from_slice(&len.to_be_bytes());
            check_bytes(&big);
            // Two messages back to back: the first is framed alone.
            let mut two = full.clone();
            two.extend_from_slice(&full);
            if let Ok((_, n)) = decode(&two) {
                assert_eq!(n, full.len());
            }
        }
    }
}

#[test]
fn short_header_length_is_fatal() {
    match decode(&hex("04000004 00000001")) {
        Err(DecodeError::Malformed(m)) => assert_eq!(m.skip, None),
        other => panic!("{other:?}"),
    }
}
