//! Meaning: OpenFlow 1.3 instructions ⇄ nicflow's [`Action`] list.
//!
//! nicflow's slow path runs one action list per rule, `goto_table` last,
//! with no action set. So `APPLY_ACTIONS` maps action by action,
//! `WRITE_METADATA` becomes a `write_metadata` action after them,
//! `GOTO_TABLE` the final `goto_table`, `CLEAR_ACTIONS` is a no-op (the
//! action set is always empty) and a non-empty `WRITE_ACTIONS` is refused
//! with `OFPBIC_UNSUP_INST`. A `METER` instruction becomes the list's first
//! action, `meter:N` (it runs before the others, as `ovs-ofctl` writes it).
//!
//! The other direction produces what `ovs-ofctl -O OpenFlow13` sends for
//! the same rule text (checked against captured bytes in the tests):
//! `mod_vlan_vid` pushes a tag first unless the match says there is one,
//! partial field writes become `NXAST_REG_LOAD`s, whole-field writes
//! `OFPAT_SET_FIELD`, `controller` an output to `OFPP_CONTROLLER`.

use super::nx::{NxCt, NxNat, CT_F_COMMIT, CT_F_FORCE, CT_RECIRC_NONE};
use super::nx::{
    NxLearn, NxLearnDst, NxLearnSpec, NxLearnSrc, LEARN_F_DELETE_LEARNED, LEARN_F_SEND_FLOW_REM,
};
use super::nx::{NAT_F_DST, NAT_F_PERSISTENT, NAT_F_PROTO_HASH, NAT_F_PROTO_RANDOM, NAT_F_SRC};
use super::{check_set_value, Instruction, OfAction};
use crate::error::{e, BadAction, BadInstruction, OfpError};
use crate::oxm::{OxmEntry, OxmField};
use nicflow_flow::{ofp, Action, CtAction, CtNat, CtZone, Field, Match, NatKind};

/// Largest group id (`OFPG_MAX`).
const OFPG_MAX: u32 = 0xffff_ff00;
/// `OFPR_ACTION`: the packet-in reason of a plain `controller` action.
const OFPR_ACTION: u8 = 1;
/// `OFPP_IN_PORT` as a 16-bit (Nicira) port.
const NX_IN_PORT: u16 = 0xfff8;

/// A rule's instructions as nicflow runs them.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Translated {
    pub actions: Vec<Action>,
}

fn bad_inst(c: BadInstruction) -> OfpError {
    OfpError::BadInstruction(c)
}

fn ones(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// Translate a rule's instructions. `m` is the rule's match (set-field
/// prerequisites are checked against it, as `ovs-ofctl` does), `table`
/// the rule's table (`goto_table` must go forward).
pub fn to_nicflow(insts: &[Instruction], m: &Match, table: u8) -> Result<Translated, OfpError> {
    let mut seen = [false; 7];
    let mut t = Translated::default();
    let mut metadata = None;
    let mut goto = None;
    let mut meter = None;
    for inst in insts {
        let kind = match inst {
            Instruction::GotoTable(_) => 1,
            Instruction::WriteMetadata { .. } => 2,
            Instruction::WriteActions(_) => 3,
            Instruction::ApplyActions(_) => 4,
            Instruction::ClearActions => 5,
            Instruction::Meter(_) => 6,
        };
        if std::mem::replace(&mut seen[kind], true) {
            // OpenFlow 1.3 has no "duplicate instruction" code.
            return Err(bad_inst(BadInstruction::UNSUP_INST));
        }
        match inst {
            Instruction::GotoTable(g) => {
                if *g <= table || *g == 255 {
                    return Err(bad_inst(BadInstruction::BAD_TABLE_ID));
                }
                goto = Some(*g);
            }
            Instruction::WriteMetadata { metadata: v, mask } => {
                if *mask != 0 {
                    metadata = Some((*v & *mask, *mask));
                }
            }
            Instruction::WriteActions(a) => {
                if !a.is_empty() {
                    return Err(bad_inst(BadInstruction::UNSUP_INST));
                }
            }
            Instruction::ApplyActions(a) => {
                // Instructions run in a fixed order, whatever the wire order:
                // apply first, so it goes to the front.
                let mut acts = actions_to_nicflow(a, m)?;
                acts.append(&mut t.actions);
                t.actions = acts;
            }
            Instruction::ClearActions => {}
            Instruction::Meter(id) => meter = Some(*id),
        }
    }
    // A conjunctive rule is a soft match that never runs (see
    // `Action::Conjunction`): OVS refuses any other action or instruction
    // beside its conjunctions, and so does nicflow.
    if t.actions.iter().any(Action::is_conjunction)
        && (meter.is_some()
            || metadata.is_some()
            || goto.is_some()
            || t.actions.iter().any(|a| !a.is_conjunction()))
    {
        return Err(e::BAC_BAD_ARG);
    }
    if let Some(id) = meter {
        t.actions.insert(0, Action::Meter(id));
    }
    if let Some((value, mask)) = metadata {
        t.actions.push(Action::WriteMetadata { value, mask });
    }
    if let Some(g) = goto {
        t.actions.push(Action::GotoTable(g));
    }
    Ok(t)
}

/// Translate an action list (apply-actions, a group bucket, a packet-out).
pub fn actions_to_nicflow(acts: &[OfAction], m: &Match) -> Result<Vec<Action>, OfpError> {
    let mut out = Vec::with_capacity(acts.len());
    for a in acts {
        if let Some(x) = action_to_nicflow(a, m)? {
            out.push(x);
        }
    }
    Ok(out)
}

fn output(port: u32, max_len: u16) -> Result<Action, OfpError> {
    Ok(match port {
        ofp::IN_PORT => Action::InPort,
        ofp::NORMAL => Action::Normal,
        ofp::FLOOD => Action::Flood,
        ofp::ALL => Action::All,
        ofp::LOCAL => Action::Local,
        ofp::CONTROLLER => Action::Controller { max_len },
        1..=ofp::MAX if max_len == 0 => Action::Output(port),
        // Kept for the flow stats; forwarding ignores it.
        1..=ofp::MAX => Action::OutputMaxLen { port, max_len },
        _ => return Err(e::bac(BadAction::BAD_OUT_PORT)),
    })
}

/// A 16-bit Nicira port widened to 32 bits.
fn port16(p: u16) -> u32 {
    if p >= 0xff00 {
        u32::from(p) | 0xffff_0000
    } else {
        u32::from(p)
    }
}

/// Write `value` under `mask` (wire terms) into wire field `f`.
fn set_wire(f: OxmField, value: u128, mask: u128, m: &Match) -> Result<Option<Action>, OfpError> {
    let d = f.def();
    let full = ones(f.wire_bits());
    match f {
        OxmField::VlanVid if mask & full == full => {
            return Ok(Some(Action::ModVlanVid((value & 0xfff) as u16)))
        }
        OxmField::VlanPcp if mask & full == full => {
            return Ok(Some(Action::ModVlanPcp((value & 7) as u8)))
        }
        _ => {}
    }
    if !d.field.settable() {
        return Err(e::bac(BadAction::BAD_SET_ARGUMENT));
    }
    if !d.pre.satisfied(m.key(), &m.mask().0) {
        return Err(e::bac(BadAction::MATCH_INCONSISTENT));
    }
    let nf_mask = f.to_nicflow(mask) & d.bits;
    if nf_mask == 0 {
        return Ok(None);
    }
    Ok(Some(Action::SetField {
        field: d.field,
        value: f.to_nicflow(value) & nf_mask,
        mask: nf_mask,
    }))
}

/// A wire field's bits `ofs..ofs+n` as nicflow field bits.
fn subfield(f: OxmField, ofs: u16, n: u16) -> Result<(Field, u8), OfpError> {
    let d = f.def();
    let nf_ofs = u32::from(ofs) + u32::from(d.shift);
    let bits = ones(n.into()).checked_shl(nf_ofs).unwrap_or(0);
    if n == 0 || bits == 0 || bits & !d.bits != 0 {
        return Err(e::bac(BadAction::BAD_SET_LEN));
    }
    Ok((d.field, nf_ofs as u8))
}

/// `NXAST_LEARN` -> `learn(...)`, with the checks of OVS's `learn_check`:
/// a source field needs its prerequisites in the learning rule's match, a
/// learned match field among the constants learned before it, a loaded
/// field must be writable.
fn learn_to_nicflow(l: &NxLearn, m: &Match) -> Result<Action, OfpError> {
    use nicflow_flow::{LearnPart, LearnSpec, LearnSrc};
    let inconsistent = e::bac(BadAction::MATCH_INCONSISTENT);
    let mut learned = Match::catchall();
    let mut parts = Vec::with_capacity(l.specs.len());
    for s in &l.specs {
        let n = s.n_bits;
        let src = match s.src {
            NxLearnSrc::Imm(v) => LearnSrc::Imm(v),
            NxLearnSrc::Field(f, ofs) => {
                let (field, ofs) = subfield(f, ofs, n)?;
                if !field.prereq().satisfied(m.key(), &m.mask().0) {
                    return Err(inconsistent);
                }
                LearnSrc::Field { field, ofs }
            }
        };
        parts.push(match s.dst {
            NxLearnDst::Match(f, ofs) => {
                let (dst, dst_ofs) = subfield(f, ofs, n)?;
                if !dst.prereq().satisfied(learned.key(), &learned.mask().0) {
                    return Err(inconsistent);
                }
                if let LearnSrc::Imm(v) = src {
                    learned.set(dst, v << dst_ofs, ones(n.into()) << dst_ofs);
                }
                LearnPart::Match {
                    dst,
                    dst_ofs,
                    n_bits: n as u8,
                    src,
                }
            }
            NxLearnDst::Load(f, ofs) => {
                let (dst, dst_ofs) = subfield(f, ofs, n)?;
                if !dst.settable() {
                    return Err(e::bac(BadAction::BAD_SET_ARGUMENT));
                }
                LearnPart::Load {
                    dst,
                    dst_ofs,
                    n_bits: n as u8,
                    src,
                }
            }
            NxLearnDst::Output => {
                let LearnSrc::Field { field, ofs } = src else {
                    return Err(e::BAC_BAD_ARG);
                };
                LearnPart::Output {
                    src: field,
                    ofs,
                    n_bits: n as u8,
                }
            }
        });
    }
    Ok(Action::Learn(Box::new(LearnSpec {
        table: l.table_id,
        idle_timeout: l.idle_timeout,
        hard_timeout: l.hard_timeout,
        fin_idle_timeout: l.fin_idle_timeout,
        fin_hard_timeout: l.fin_hard_timeout,
        priority: l.priority,
        cookie: l.cookie,
        send_flow_rem: l.flags & LEARN_F_SEND_FLOW_REM != 0,
        delete_learned: l.flags & LEARN_F_DELETE_LEARNED != 0,
        parts,
    })))
}

/// `learn(...)` -> `NXAST_LEARN`, fields under the names `move` uses.
fn learn_from_nicflow(l: &nicflow_flow::LearnSpec) -> Result<OfAction, OfpError> {
    use nicflow_flow::{LearnPart, LearnSrc};
    let wire = |f: Field, ofs: u8, n: u8| -> Result<(OxmField, u16), OfpError> {
        let w = OxmField::for_nicflow(f).ok_or(e::BAC_BAD_ARG)?;
        if u32::from(ofs) + u32::from(n) > w.wire_bits() {
            return Err(e::BAC_BAD_ARG);
        }
        Ok((w, ofs.into()))
    };
    let src = |s: LearnSrc, n: u8| -> Result<NxLearnSrc, OfpError> {
        Ok(match s {
            LearnSrc::Imm(v) => NxLearnSrc::Imm(v),
            LearnSrc::Field { field, ofs } => {
                let (f, o) = wire(field, ofs, n)?;
                NxLearnSrc::Field(f, o)
            }
        })
    };
    let mut specs = Vec::with_capacity(l.parts.len());
    for p in &l.parts {
        specs.push(match *p {
            LearnPart::Match {
                dst,
                dst_ofs,
                n_bits,
                src: s,
            } => {
                let (f, o) = wire(dst, dst_ofs, n_bits)?;
                NxLearnSpec {
                    n_bits: n_bits.into(),
                    src: src(s, n_bits)?,
                    dst: NxLearnDst::Match(f, o),
                }
            }
            LearnPart::Load {
                dst,
                dst_ofs,
                n_bits,
                src: s,
            } => {
                let (f, o) = wire(dst, dst_ofs, n_bits)?;
                NxLearnSpec {
                    n_bits: n_bits.into(),
                    src: src(s, n_bits)?,
                    dst: NxLearnDst::Load(f, o),
                }
            }
            LearnPart::Output {
                src: field,
                ofs,
                n_bits,
            } => NxLearnSpec {
                n_bits: n_bits.into(),
                src: src(LearnSrc::Field { field, ofs }, n_bits)?,
                dst: NxLearnDst::Output,
            },
        });
    }
    let flags = if l.send_flow_rem {
        LEARN_F_SEND_FLOW_REM
    } else {
        0
    } | if l.delete_learned {
        LEARN_F_DELETE_LEARNED
    } else {
        0
    };
    Ok(OfAction::Learn(Box::new(NxLearn {
        idle_timeout: l.idle_timeout,
        hard_timeout: l.hard_timeout,
        priority: l.priority,
        cookie: l.cookie,
        flags,
        table_id: l.table,
        fin_idle_timeout: l.fin_idle_timeout,
        fin_hard_timeout: l.fin_hard_timeout,
        specs,
    })))
}

fn ct_to_nicflow(ct: &NxCt) -> Result<Action, OfpError> {
    if ct.alg != 0 {
        // nicflow's tracker has no application-layer gateways.
        return Err(e::BAC_BAD_ARG);
    }
    let commit = ct.flags & CT_F_COMMIT != 0;
    let zone = match ct.zone_src {
        None => CtZone::Imm(ct.zone),
        Some(f) => {
            let (ofs, n) = (ct.zone >> 6, (ct.zone & 63) + 1);
            let (field, ofs) = subfield(f, ofs, n)?;
            CtZone::Field {
                field,
                ofs,
                nbits: n as u8,
            }
        }
    };
    let mut c = CtAction {
        commit,
        force: ct.flags & CT_F_FORCE != 0,
        zone,
        table: (ct.recirc_table != CT_RECIRC_NONE).then_some(ct.recirc_table),
        set_mark: None,
        set_label: None,
        nat: None,
        moves: Vec::new(),
    };
    for a in &ct.actions {
        let (f, v, mask) = match a {
            OfAction::Nat(n) => {
                if c.nat.is_some() {
                    return Err(e::BAC_BAD_ARG);
                }
                if !commit && (n.flags != 0 || n.addr_min.is_some()) {
                    return Err(e::BAC_BAD_ARG);
                }
                c.nat = Some(nat_to_nicflow(n));
                continue;
            }
            OfAction::SetField(en) => (en.field, en.value, ones(en.field.wire_bits())),
            OfAction::RegLoad2(en) => (
                en.field,
                en.value,
                en.mask.unwrap_or(ones(en.field.wire_bits())),
            ),
            OfAction::RegLoad {
                dst,
                ofs,
                n_bits,
                value,
            } => (
                *dst,
                u128::from(*value) << ofs,
                ones((*n_bits).into()) << ofs,
            ),
            OfAction::RegMove {
                src,
                src_ofs,
                dst,
                dst_ofs,
                n_bits,
            } if commit && matches!(dst, OxmField::CtMark | OxmField::CtLabel) => {
                let (src, src_ofs) = subfield(*src, *src_ofs, *n_bits)?;
                let (dst, dst_ofs) = subfield(*dst, *dst_ofs, *n_bits)?;
                c.moves.push(nicflow_flow::CtMove {
                    src,
                    src_ofs,
                    dst,
                    dst_ofs,
                    n_bits: *n_bits as u8,
                });
                continue;
            }
            _ => return Err(e::BAC_BAD_ARG),
        };
        if !commit {
            return Err(e::BAC_BAD_ARG);
        }
        match f {
            OxmField::CtMark => {
                let (ov, om) = c.set_mark.unwrap_or((0, 0));
                let (v, mask) = (v as u32, mask as u32);
                c.set_mark = Some(((ov & !mask) | (v & mask), om | mask));
            }
            OxmField::CtLabel => {
                let (ov, om) = c.set_label.unwrap_or((0, 0));
                c.set_label = Some(((ov & !mask) | (v & mask), om | mask));
            }
            _ => return Err(e::BAC_BAD_ARG),
        }
    }
    Ok(Action::Ct(c))
}

fn nat_to_nicflow(n: &NxNat) -> CtNat {
    CtNat {
        kind: if n.flags & NAT_F_SRC != 0 {
            Some(NatKind::Src)
        } else if n.flags & NAT_F_DST != 0 {
            Some(NatKind::Dst)
        } else {
            None
        },
        addr: n.addr_min.map(|min| (min, n.addr_max.unwrap_or(min))),
        ports: n.proto_min.map(|min| (min, n.proto_max.unwrap_or(min))),
        persistent: n.flags & NAT_F_PERSISTENT != 0,
        hash: n.flags & NAT_F_PROTO_HASH != 0,
        random: n.flags & NAT_F_PROTO_RANDOM != 0,
    }
}

/// The plainest action for these controller options (as the rule
/// language's `controller_action`): `output:CONTROLLER` when only
/// `max_len` is set, so a rule has one form whichever way it came.
fn nicflow_ofctl_controller(o: nicflow_flow::ControllerOpts) -> Action {
    if o.controller_id == 0
        && o.reason == OFPR_ACTION
        && o.userdata.is_empty()
        && !o.pause
        && o.meter_id.is_none()
    {
        Action::Controller { max_len: o.max_len }
    } else {
        Action::Controller2(Box::new(o))
    }
}

fn action_to_nicflow(a: &OfAction, m: &Match) -> Result<Option<Action>, OfpError> {
    Ok(Some(match a {
        OfAction::Output { port, max_len } => output(*port, *max_len)?,
        OfAction::Group(g) => {
            if *g > OFPG_MAX {
                return Err(e::bac(BadAction::BAD_OUT_GROUP));
            }
            Action::Group(*g)
        }
        // OpenFlow 1.5's meter action (1.3's instruction, see `to_nicflow`).
        OfAction::Meter(id) => Action::Meter(*id),
        OfAction::SetField(en) => {
            check_set_value(en)?;
            return set_wire(en.field, en.value, ones(en.field.wire_bits()), m);
        }
        OfAction::RegLoad2(en) => {
            let mask = en.mask.unwrap_or(ones(en.field.wire_bits()));
            return set_wire(en.field, en.value, mask, m);
        }
        OfAction::RegLoad {
            dst,
            ofs,
            n_bits,
            value,
        } => {
            let mask = ones((*n_bits).into()) << ofs;
            return set_wire(*dst, u128::from(*value) << ofs, mask, m);
        }
        OfAction::PushVlan(t) => match *t {
            0x8100 | 0x88a8 => Action::PushVlan(*t),
            _ => return Err(e::BAC_BAD_ARG),
        },
        OfAction::PopVlan => Action::PopVlan,
        OfAction::SetNwTtl(t) => {
            if !OxmField::IpTtl.def().pre.satisfied(m.key(), &m.mask().0) {
                return Err(e::bac(BadAction::MATCH_INCONSISTENT));
            }
            Action::SetField {
                field: Field::NwTtl,
                value: (*t).into(),
                mask: 0xff,
            }
        }
        OfAction::DecNwTtl => Action::DecTtl,
        OfAction::Learn(l) => learn_to_nicflow(l, m)?,
        // No ids is OVS's plain dec_ttl (it prints `dec_ttl`).
        OfAction::DecTtlCntIds(ids) if ids.is_empty() => Action::DecTtl,
        OfAction::DecTtlCntIds(ids) => Action::DecTtlIds(ids.clone()),
        OfAction::Resubmit { in_port, table } => Action::Resubmit {
            port: (*in_port != NX_IN_PORT).then(|| port16(*in_port)),
            table: table.filter(|t| *t != 255),
        },
        OfAction::RegMove {
            src,
            src_ofs,
            dst,
            dst_ofs,
            n_bits,
        } => {
            let (sf, so) = subfield(*src, *src_ofs, *n_bits)?;
            let (df, dof) = subfield(*dst, *dst_ofs, *n_bits)?;
            if !df.settable() {
                return Err(e::bac(BadAction::BAD_SET_ARGUMENT));
            }
            Action::Move {
                src: sf,
                src_ofs: so,
                dst: df,
                dst_ofs: dof,
                n_bits: *n_bits as u8,
            }
        }
        OfAction::Controller {
            max_len,
            controller_id,
            reason,
        } => {
            if *reason > 5 {
                return Err(e::BAC_BAD_ARG);
            }
            nicflow_ofctl_controller(nicflow_flow::ControllerOpts {
                max_len: *max_len,
                controller_id: *controller_id,
                reason: *reason,
                userdata: Vec::new(),
                pause: false,
                meter_id: None,
            })
        }
        OfAction::Ct(ct) => ct_to_nicflow(ct)?,
        // NAT only makes sense inside ct(...).
        OfAction::Nat(_) => return Err(e::BAC_BAD_ARG),
        OfAction::CtClear => Action::CtClear,
        OfAction::Controller2(o) => nicflow_ofctl_controller((**o).clone()),
        OfAction::Conjunction {
            id,
            clause,
            n_clauses,
        } => Action::Conjunction {
            id: *id,
            clause: clause + 1,
            n_clauses: *n_clauses,
        },
        OfAction::Clone(inner) => {
            let inner = actions_to_nicflow(inner, m)?;
            if inner.iter().any(Action::is_conjunction) {
                return Err(e::BAC_BAD_ARG);
            }
            Action::Clone(inner)
        }
        OfAction::CheckPktLarger { pkt_len, dst, ofs } => {
            let (dst, ofs) = subfield(*dst, *ofs, 1)?;
            if !dst.settable() {
                return Err(e::bac(BadAction::BAD_SET_ARGUMENT));
            }
            Action::CheckPktLarger {
                len: *pkt_len,
                dst,
                ofs,
            }
        }
        OfAction::StackPush { field, ofs, n_bits } => {
            let (field, ofs) = subfield(*field, *ofs, *n_bits)?;
            Action::StackPush {
                field,
                ofs,
                n_bits: *n_bits as u8,
            }
        }
        OfAction::StackPop { field, ofs, n_bits } => {
            let (field, ofs) = subfield(*field, *ofs, *n_bits)?;
            if !field.settable() {
                return Err(e::bac(BadAction::BAD_SET_ARGUMENT));
            }
            Action::StackPop {
                field,
                ofs,
                n_bits: *n_bits as u8,
            }
        }
        OfAction::OutputReg {
            src,
            ofs,
            n_bits,
            max_len,
        } => {
            let (field, ofs) = subfield(*src, *ofs, (*n_bits).into())?;
            Action::OutputReg {
                field,
                ofs,
                nbits: *n_bits,
                max_len: *max_len,
            }
        }
    }))
}

/// Encode a nicflow rule's actions as OpenFlow 1.3 instructions, as
/// `ovs-ofctl -O OpenFlow13` would for the same rule (`m` is the rule's
/// match: it decides `tcp_src` vs `udp_src` and whether `mod_vlan_vid`
/// pushes a tag).
pub fn from_nicflow(actions: &[Action], m: &Match) -> Result<Vec<Instruction>, OfpError> {
    let (body, goto) = match actions.split_last() {
        Some((Action::GotoTable(t), rest)) => (rest, Some(*t)),
        _ => (actions, None),
    };
    // `write_metadata` (what `WRITE_METADATA` becomes, see `to_nicflow`;
    // the rule language keeps it after every other action but `goto_table`)
    // goes back out as that instruction, so a controller reads its rule as
    // it sent it (os-ken's switch tester compares), and as `ovs-ofctl`
    // sends `write_metadata:V/M`. A `set_field:..->metadata` stays an
    // action, as `ovs-ofctl` sends it.
    let (body, metadata) = match body.split_last() {
        Some((Action::WriteMetadata { value, mask }, rest)) => (rest, Some((*value, *mask))),
        _ => (body, None),
    };
    let mut insts = Vec::new();
    let body = match body.split_first() {
        Some((Action::Meter(id), rest)) => {
            insts.push(Instruction::Meter(*id));
            rest
        }
        _ => body,
    };
    let acts = actions_from_nicflow(body, m)?;
    if !acts.is_empty() {
        insts.push(Instruction::ApplyActions(acts));
    }
    if let Some((metadata, mask)) = metadata {
        insts.push(Instruction::WriteMetadata { metadata, mask });
    }
    if let Some(t) = goto {
        insts.push(Instruction::GotoTable(t));
    }
    Ok(insts)
}

/// Encode an action list without `goto_table` (group buckets, packet-out).
pub fn actions_from_nicflow(actions: &[Action], m: &Match) -> Result<Vec<OfAction>, OfpError> {
    let (tci, tci_mask) = m.get(Field::VlanTci);
    let mut has_vlan = tci_mask & 0x1000 != 0 && tci & 0x1000 != 0;
    let mut out = Vec::new();
    let port = |p: u32| OfAction::Output {
        port: p,
        max_len: 0,
    };
    for a in actions {
        match a {
            Action::Output(p) => out.push(port(*p)),
            Action::OutputMaxLen { port, max_len } => out.push(OfAction::Output {
                port: *port,
                max_len: *max_len,
            }),
            Action::InPort => out.push(port(ofp::IN_PORT)),
            Action::Normal => out.push(port(ofp::NORMAL)),
            Action::Flood => out.push(port(ofp::FLOOD)),
            Action::All => out.push(port(ofp::ALL)),
            Action::Local => out.push(port(ofp::LOCAL)),
            Action::Controller { max_len } => out.push(OfAction::Output {
                port: ofp::CONTROLLER,
                max_len: *max_len,
            }),
            Action::SetField { field, value, mask } => {
                write_field(*field, *value, *mask, m, &mut out)?
            }
            Action::PushVlan(t) => {
                has_vlan = true;
                out.push(OfAction::PushVlan(*t));
            }
            Action::PopVlan => {
                has_vlan = false;
                out.push(OfAction::PopVlan);
            }
            Action::ModVlanVid(vid) => {
                if !has_vlan {
                    out.push(OfAction::PushVlan(0x8100));
                    has_vlan = true;
                }
                out.push(OfAction::SetField(OxmEntry {
                    field: OxmField::VlanVid,
                    value: u128::from(vid & 0xfff) | 0x1000,
                    mask: None,
                }));
            }
            Action::ModVlanPcp(pcp) => {
                if !has_vlan {
                    out.push(OfAction::PushVlan(0x8100));
                    has_vlan = true;
                }
                out.push(OfAction::SetField(OxmEntry {
                    field: OxmField::VlanPcp,
                    value: u128::from(pcp & 7),
                    mask: None,
                }));
            }
            Action::DecTtl => out.push(OfAction::DecNwTtl),
            Action::Learn(l) => out.push(learn_from_nicflow(l)?),
            Action::DecTtlIds(ids) => out.push(OfAction::DecTtlCntIds(ids.clone())),
            Action::GotoTable(_) => return Err(e::BAC_BAD_ARG),
            Action::Resubmit { port, table } => {
                let in_port = match port {
                    None => NX_IN_PORT,
                    Some(p) if *p < 0xff00 => *p as u16,
                    Some(p) if *p >= 0xffff_ff00 => (*p & 0xffff) as u16,
                    Some(_) => return Err(e::BAC_BAD_ARG),
                };
                out.push(OfAction::Resubmit {
                    in_port,
                    table: Some(table.unwrap_or(255)),
                });
            }
            Action::Move {
                src,
                src_ofs,
                dst,
                dst_ofs,
                n_bits,
            } => {
                let s = OxmField::for_nicflow(*src).ok_or(e::BAC_BAD_ARG)?;
                let d = OxmField::for_nicflow(*dst).ok_or(e::BAC_BAD_ARG)?;
                out.push(OfAction::RegMove {
                    src: s,
                    src_ofs: (*src_ofs).into(),
                    dst: d,
                    dst_ofs: (*dst_ofs).into(),
                    n_bits: (*n_bits).into(),
                });
            }
            Action::Ct(c) => out.push(ct_from_nicflow(c, m)?),
            Action::CtClear => out.push(OfAction::CtClear),
            Action::Group(g) => out.push(OfAction::Group(*g)),
            // Only a rule's first action: an instruction, not an action.
            Action::Meter(_) => return Err(e::bac(BadAction::BAD_TYPE)),
            // Only before a rule's goto_table: an instruction too.
            Action::WriteMetadata { .. } => return Err(e::bac(BadAction::BAD_TYPE)),
            Action::OutputReg {
                field,
                ofs,
                nbits,
                max_len,
            } => {
                let src = OxmField::for_nicflow(*field).ok_or(e::BAC_BAD_ARG)?;
                out.push(OfAction::OutputReg {
                    src,
                    ofs: (*ofs).into(),
                    n_bits: *nbits,
                    max_len: *max_len,
                });
            }
            // OpenFlow 1.3 has no enqueue action: `ovs-ofctl -O OpenFlow13`
            // sends `set_queue:Q,output:P,pop_queue`. nicflow has no queues
            // to select and this crate no `SET_QUEUE`, so the output alone
            // goes out; the queue number is not on the wire.
            Action::Enqueue { port: p, .. } => out.push(port(*p)),
            Action::Controller2(o) => {
                // OVS sends the old NXAST_CONTROLLER when it can carry them.
                if o.userdata.is_empty() && !o.pause && o.meter_id.is_none() {
                    out.push(OfAction::Controller {
                        max_len: o.max_len,
                        controller_id: o.controller_id,
                        reason: o.reason,
                    });
                } else {
                    out.push(OfAction::Controller2(o.clone()));
                }
            }
            Action::Conjunction {
                id,
                clause,
                n_clauses,
            } => out.push(OfAction::Conjunction {
                id: *id,
                clause: clause.saturating_sub(1),
                n_clauses: *n_clauses,
            }),
            Action::Clone(inner) => out.push(OfAction::Clone(actions_from_nicflow(inner, m)?)),
            Action::CheckPktLarger { len, dst, ofs } => out.push(OfAction::CheckPktLarger {
                pkt_len: *len,
                dst: OxmField::for_nicflow(*dst).ok_or(e::BAC_BAD_ARG)?,
                ofs: (*ofs).into(),
            }),
            Action::StackPush { field, ofs, n_bits } | Action::StackPop { field, ofs, n_bits } => {
                let f = OxmField::for_nicflow(*field).ok_or(e::BAC_BAD_ARG)?;
                let (ofs, n_bits) = ((*ofs).into(), (*n_bits).into());
                out.push(if matches!(a, Action::StackPush { .. }) {
                    OfAction::StackPush {
                        field: f,
                        ofs,
                        n_bits,
                    }
                } else {
                    OfAction::StackPop {
                        field: f,
                        ofs,
                        n_bits,
                    }
                });
            }
        }
    }
    Ok(out)
}

fn ct_from_nicflow(c: &CtAction, m: &Match) -> Result<OfAction, OfpError> {
    let (zone_src, zone) = match c.zone {
        CtZone::Imm(z) => (None, z),
        CtZone::Field { field, ofs, nbits } => (
            Some(OxmField::for_nicflow(field).ok_or(e::BAC_BAD_ARG)?),
            super::nx::ofs_nbits(ofs.into(), nbits),
        ),
    };
    let mut actions = Vec::new();
    if let Some(n) = &c.nat {
        let mut flags = 0;
        match n.kind {
            Some(NatKind::Src) => flags |= NAT_F_SRC,
            Some(NatKind::Dst) => flags |= NAT_F_DST,
            None => {}
        }
        if n.persistent {
            flags |= NAT_F_PERSISTENT;
        }
        if n.hash {
            flags |= NAT_F_PROTO_HASH;
        }
        if n.random {
            flags |= NAT_F_PROTO_RANDOM;
        }
        let (addr_min, addr_max) = match n.addr {
            Some((a, b)) => (Some(a), (a != b).then_some(b)),
            None => (None, None),
        };
        let (proto_min, proto_max) = match n.ports {
            Some((a, b)) => (Some(a), (a != b).then_some(b)),
            None => (None, None),
        };
        actions.push(OfAction::Nat(NxNat {
            flags,
            addr_min,
            addr_max,
            proto_min,
            proto_max,
        }));
    }
    if let Some((v, mask)) = c.set_mark {
        write_field(Field::CtMark, v.into(), mask.into(), m, &mut actions)?;
    }
    if let Some((v, mask)) = c.set_label {
        write_field(Field::CtLabel, v, mask, m, &mut actions)?;
    }
    for mv in &c.moves {
        actions.push(OfAction::RegMove {
            src: OxmField::for_nicflow(mv.src).ok_or(e::BAC_BAD_ARG)?,
            src_ofs: mv.src_ofs.into(),
            dst: OxmField::for_nicflow(mv.dst).ok_or(e::BAC_BAD_ARG)?,
            dst_ofs: mv.dst_ofs.into(),
            n_bits: mv.n_bits.into(),
        });
    }
    let mut flags = 0;
    if c.commit {
        flags |= CT_F_COMMIT;
    }
    if c.force {
        flags |= CT_F_FORCE;
    }
    Ok(OfAction::Ct(NxCt {
        flags,
        zone_src,
        zone,
        recirc_table: c.table.unwrap_or(CT_RECIRC_NONE),
        alg: 0,
        actions,
    }))
}

/// The wire field `set_field` on nicflow field `f` uses under match `m`.
fn wire_field_for_set(f: Field, m: &Match) -> Result<OxmField, OfpError> {
    let proto = (m.mask().0.nw_proto == 0xff).then_some(m.key().nw_proto);
    Ok(match (f, proto) {
        (Field::TpSrc, Some(17)) => OxmField::UdpSrc,
        (Field::TpDst, Some(17)) => OxmField::UdpDst,
        (Field::TpSrc, Some(132)) => OxmField::SctpSrc,
        (Field::TpDst, Some(132)) => OxmField::SctpDst,
        _ => OxmField::for_nicflow(f).ok_or(e::BAC_BAD_ARG)?,
    })
}

/// Encode a write of `value` under `mask` (nicflow terms) into `f`:
/// `OFPAT_SET_FIELD` for a whole field, `NXAST_REG_LOAD`s (one per run of
/// mask bits, at most 64 bits each) otherwise, as Open vSwitch does.
fn write_field(
    f: Field,
    value: u128,
    mask: u128,
    m: &Match,
    out: &mut Vec<OfAction>,
) -> Result<(), OfpError> {
    let exact = |field: OxmField, v: u128| {
        OfAction::SetField(OxmEntry {
            field,
            value: v,
            mask: None,
        })
    };
    if f == Field::NwTos {
        let (v, mask) = (value as u8, mask as u8);
        if mask & 0xfc == 0xfc {
            out.push(exact(OxmField::IpDscp, u128::from(v >> 2)));
        }
        if mask & 0x03 == 0x03 {
            out.push(exact(OxmField::IpEcn, u128::from(v & 3)));
        }
        let rest = mask
            & !(if mask & 0xfc == 0xfc { 0xfc } else { 0 })
            & !(if mask & 0x03 == 0x03 { 0x03 } else { 0 });
        if rest & 0xfc != 0 {
            reg_loads(OxmField::IpTos, v.into(), (rest & 0xfc).into(), out);
        }
        if rest & 0x03 != 0 {
            reg_loads(OxmField::IpEcn, (v & 3).into(), (rest & 3).into(), out);
        }
        return Ok(());
    }
    if f == Field::NwTtl && mask & 0xff == 0xff {
        out.push(OfAction::SetNwTtl(value as u8));
        return Ok(());
    }
    let wf = wire_field_for_set(f, m)?;
    let d = wf.def();
    let wire_mask = wf.from_nicflow(mask & d.bits);
    let wire_value = wf.from_nicflow(value & mask & d.bits);
    if wire_mask == 0 {
        return Ok(());
    }
    if wire_mask == wf.from_nicflow(d.bits) {
        out.push(exact(wf, wire_value));
    } else {
        reg_loads(wf, wire_value, wire_mask, out);
    }
    Ok(())
}

/// One `NXAST_REG_LOAD` per run of consecutive mask bits (≤ 64 bits each).
fn reg_loads(f: OxmField, value: u128, mask: u128, out: &mut Vec<OfAction>) {
    let width = f.wire_bits();
    let mut ofs = 0u32;
    while ofs < width {
        if mask >> ofs & 1 == 0 {
            ofs += 1;
            continue;
        }
        let mut n = 0u32;
        while ofs + n < width && n < 64 && mask >> (ofs + n) & 1 == 1 {
            n += 1;
        }
        out.push(OfAction::RegLoad {
            dst: f,
            ofs: ofs as u16,
            n_bits: n as u8,
            value: ((value >> ofs) & ones(n)) as u64,
        });
        ofs += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oxm::{apply_entry, OxmEntry};

    fn tcp_match() -> Match {
        let mut m = Match::catchall();
        for (field, value) in [(OxmField::EthType, 0x0800), (OxmField::IpProto, 6)] {
            let e = OxmEntry {
                field,
                value,
                mask: None,
            };
            apply_entry(&mut m, e).unwrap();
        }
        m
    }

    fn set(field: OxmField, value: u128) -> OfAction {
        OfAction::SetField(OxmEntry {
            field,
            value,
            mask: None,
        })
    }

    #[test]
    fn refusals() {
        let m = tcp_match();
        let apply = |a: OfAction| to_nicflow(&[Instruction::ApplyActions(vec![a])], &m, 0);
        let bac = |c| Err(OfpError::BadAction(c));
        let bic = |c| Err(OfpError::BadInstruction(c));
        // No action set in nicflow.
        assert_eq!(
            to_nicflow(
                &[Instruction::WriteActions(vec![OfAction::DecNwTtl])],
                &m,
                0
            ),
            bic(BadInstruction::UNSUP_INST)
        );
        assert!(to_nicflow(&[Instruction::WriteActions(vec![])], &m, 0).is_ok());
        // goto_table must go forward.
        assert_eq!(
            to_nicflow(&[Instruction::GotoTable(3)], &m, 3),
            bic(BadInstruction::BAD_TABLE_ID)
        );
        assert_eq!(
            to_nicflow(
                &[Instruction::ClearActions, Instruction::ClearActions],
                &m,
                0
            ),
            bic(BadInstruction::UNSUP_INST)
        );
        // udp_dst on a tcp rule; eth_type is not writable.
        assert_eq!(
            apply(set(OxmField::UdpDst, 53)),
            bac(BadAction::MATCH_INCONSISTENT)
        );
        assert_eq!(
            apply(set(OxmField::EthType, 0x86dd)),
            bac(BadAction::BAD_SET_ARGUMENT)
        );
        assert_eq!(
            apply(OfAction::Output {
                port: 0xffff_ffff,
                max_len: 0
            }),
            bac(BadAction::BAD_OUT_PORT)
        );
        assert_eq!(
            apply(OfAction::PushVlan(0x0800)),
            bac(BadAction::BAD_ARGUMENT)
        );
    }

    #[test]
    fn instruction_order_is_fixed() {
        let m = tcp_match();
        let t = to_nicflow(
            &[
                Instruction::GotoTable(5),
                Instruction::WriteMetadata {
                    metadata: 0x13,
                    mask: 0xf,
                },
                Instruction::ApplyActions(vec![set(OxmField::TcpDst, 80)]),
                Instruction::Meter(7),
            ],
            &m,
            1,
        )
        .unwrap();
        assert_eq!(
            t.actions,
            vec![
                Action::Meter(7),
                Action::SetField {
                    field: Field::TpDst,
                    value: 80,
                    mask: 0xffff
                },
                Action::WriteMetadata {
                    value: 3,
                    mask: 0xf
                },
                Action::GotoTable(5)
            ]
        );
    }

    #[test]
    fn write_metadata_before_goto_reads_back_as_the_instruction() {
        // os-ken's switch tester (match/02_METADATA*): WRITE_METADATA and
        // GOTO_TABLE must come back as sent, not as a reg_load action.
        let m = tcp_match();
        let sent = vec![
            Instruction::Meter(3),
            Instruction::ApplyActions(vec![set(OxmField::TcpDst, 80)]),
            Instruction::WriteMetadata {
                metadata: 0xff,
                mask: 0xffff_ffff,
            },
            Instruction::GotoTable(1),
        ];
        let t = to_nicflow(&sent, &m, 0).unwrap();
        assert_eq!(from_nicflow(&t.actions, &m).unwrap(), sent);
        // Only the metadata write: no empty apply-actions.
        let sent = vec![
            Instruction::WriteMetadata {
                metadata: 0x10,
                mask: 0xf0,
            },
            Instruction::GotoTable(4),
        ];
        let t = to_nicflow(&sent, &Match::catchall(), 2).unwrap();
        assert_eq!(from_nicflow(&t.actions, &Match::catchall()).unwrap(), sent);
        // `write_metadata` without a goto is the instruction too, as
        // ovs-ofctl sends `output:1,write_metadata:0x5`.
        let acts = [
            Action::Output(1),
            Action::WriteMetadata {
                value: 5,
                mask: u64::MAX,
            },
        ];
        assert_eq!(
            from_nicflow(&acts, &Match::catchall()).unwrap(),
            vec![
                Instruction::ApplyActions(vec![OfAction::Output {
                    port: 1,
                    max_len: 0
                }]),
                Instruction::WriteMetadata {
                    metadata: 5,
                    mask: u64::MAX
                }
            ]
        );
        // `enqueue`: the output goes out (nicflow has no queues to name).
        let acts = [Action::Enqueue { port: 3, queue: 7 }];
        assert_eq!(
            from_nicflow(&acts, &Match::catchall()).unwrap(),
            vec![Instruction::ApplyActions(vec![OfAction::Output {
                port: 3,
                max_len: 0
            }])]
        );
        // A `set_field:..->metadata` stays an action (as ovs-ofctl sends
        // it).
        let acts = [Action::SetField {
            field: Field::Metadata,
            value: 5,
            mask: u64::MAX.into(),
        }];
        assert!(matches!(
            from_nicflow(&acts, &Match::catchall()).unwrap().as_slice(),
            [Instruction::ApplyActions(a)] if a.len() == 1
        ));
    }

    #[test]
    fn partial_writes_become_reg_loads() {
        let mut out = Vec::new();
        write_field(
            Field::XXReg(0),
            0xabc << 40,
            ((1u128 << 70) - 1) << 40,
            &Match::catchall(),
            &mut out,
        )
        .unwrap();
        // 70 bits from bit 40: one 64-bit load and one 6-bit load.
        assert_eq!(out.len(), 2);
        assert!(matches!(
            out[0],
            OfAction::RegLoad {
                ofs: 40,
                n_bits: 64,
                value: 0xabc,
                ..
            }
        ));
        assert!(matches!(
            out[1],
            OfAction::RegLoad {
                ofs: 104,
                n_bits: 6,
                ..
            }
        ));
    }

    /// One OpenFlow 1.5 `OFPAT_SET_FIELD` with a masked OXM, as OVS encodes
    /// `load:` and `set_field:V/M->` in 1.5.
    fn masked_set_field(field: OxmField, value: u128, mask: u128) -> Vec<u8> {
        use crate::wire;
        let mut b = Vec::new();
        wire::put_u16(&mut b, 25); // OFPAT_SET_FIELD
        wire::put_u16(&mut b, 0);
        crate::oxm::write_entry(&mut b, field, true, value, Some(mask));
        wire::pad8_from(&mut b, 0);
        let len = wire::len16(&b, 0);
        wire::patch_u16(&mut b, 2, len);
        b
    }

    /// ovn-controller (OpenFlow 1.5) sends partial loads as masked
    /// set-field, on their own and inside `ct(commit, exec(...))`
    /// (`set_field:0x2/0x2->ct_mark` in its load-balancer groups); both
    /// were refused with OFPBAC_BAD_SET_ARGUMENT, which made it reconnect
    /// and reinstall forever.
    #[test]
    fn of15_masked_set_field_is_a_partial_load() {
        let acts =
            super::super::decode_actions(&masked_set_field(OxmField::Reg(10), 1, 1)).unwrap();
        assert!(matches!(
            &acts[..],
            [OfAction::RegLoad2(OxmEntry { mask: Some(1), .. })]
        ));
        let got = actions_to_nicflow(&acts, &Match::catchall()).unwrap();
        assert!(
            matches!(&got[..], [Action::SetField { value, mask, .. }] if value == mask && mask.count_ones() == 1),
            "{got:?}"
        );
        // A value outside its mask stays refused.
        assert_eq!(
            super::super::decode_actions(&masked_set_field(OxmField::Reg(10), 3, 1)),
            Err(OfpError::BadAction(BadAction::BAD_SET_ARGUMENT))
        );
        let exec = super::super::decode_actions(&masked_set_field(OxmField::CtMark, 2, 2)).unwrap();
        let ct = NxCt {
            flags: CT_F_COMMIT,
            zone_src: None,
            zone: 5,
            recirc_table: CT_RECIRC_NONE,
            alg: 0,
            actions: exec,
        };
        match ct_to_nicflow(&ct).unwrap() {
            Action::Ct(c) => assert_eq!(c.set_mark, Some((2, 2))),
            other => panic!("{other:?}"),
        }
    }

    /// ovn-controller (OpenFlow 1.5) sends `move:` as OFPAT_COPY_FIELD
    /// (`move:NXM_NX_REG10[12]->NXM_NX_XXREG0[111]` in its table 8 flows);
    /// it was OFPBAC_BAD_TYPE.
    #[test]
    fn of15_copy_field_is_a_move() {
        use crate::oxm::OxmHeader;
        use crate::wire;
        let copy = |n_bits: u16, src_ofs: u16, dst: OxmField, dst_ofs: u16| {
            let mut b = Vec::new();
            wire::put_u16(&mut b, 28); // OFPAT_COPY_FIELD
            wire::put_u16(&mut b, 0);
            for v in [n_bits, src_ofs, dst_ofs, 0] {
                wire::put_u16(&mut b, v);
            }
            OxmHeader::for_field(OxmField::Reg(10), true, false).write(&mut b);
            OxmHeader::for_field(dst, true, false).write(&mut b);
            wire::pad8_from(&mut b, 0);
            let len = wire::len16(&b, 0);
            wire::patch_u16(&mut b, 2, len);
            b
        };
        let acts = super::super::decode_actions(&copy(1, 12, OxmField::XXReg(0), 111)).unwrap();
        assert_eq!(
            acts,
            vec![OfAction::RegMove {
                src: OxmField::Reg(10),
                src_ofs: 12,
                dst: OxmField::XXReg(0),
                dst_ofs: 111,
                n_bits: 1
            }]
        );
        assert!(matches!(
            &actions_to_nicflow(&acts, &Match::catchall()).unwrap()[..],
            [Action::Move { n_bits: 1, .. }]
        ));
        // Bits past the destination's end stay refused.
        assert!(super::super::decode_actions(&copy(2, 12, OxmField::XXReg(0), 127)).is_err());
    }
}
