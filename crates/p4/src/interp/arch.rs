//! Architecture models: how the blocks of the `main` package instance are
//! chained for one packet, which metadata they get (input port,
//! timestamps), and what their outputs mean (send_to_port, drop,
//! egress_spec, recirculation). One packet enters [`crate::Pipeline::process`]
//! and goes through the chosen model here.

use std::fmt;
use std::str::FromStr;

/// The architecture a program is run under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// `pna.p4`: PNA_NIC(MainParser, PreControl, MainControl, MainDeparser).
    Pna,
    /// `tc/pna.p4`: PNA_NIC(Parser, Main, Deparser) (P4TC).
    PnaTc,
    /// `v1model.p4`: V1Switch (BMv2 simple_switch semantics).
    V1Model,
    /// `bmv2/psa.p4`: PSA_Switch.
    Psa,
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arch::Pna => "pna",
            Arch::PnaTc => "pna-tc",
            Arch::V1Model => "v1model",
            Arch::Psa => "psa",
        })
    }
}

impl FromStr for Arch {
    type Err = String;
    fn from_str(s: &str) -> Result<Arch, String> {
        match s {
            "pna" => Ok(Arch::Pna),
            "pna-tc" | "tc" | "p4tc" => Ok(Arch::PnaTc),
            "v1model" => Ok(Arch::V1Model),
            "psa" => Ok(Arch::Psa),
            o => Err(format!(
                "unknown architecture {o} (pna, pna-tc, v1model, psa)"
            )),
        }
    }
}

/// BMv2's drop port (mark_to_drop sets egress_spec to it).
pub const V1_DROP_PORT: u32 = 511;
/// Bound on recirculation / resubmission passes per input packet.
pub const MAX_PASSES: u32 = 16;
/// PSA_PORT_RECIRCULATE in bmv2/psa.p4.
pub const PSA_PORT_RECIRCULATE: u32 = 0xffff_fffa;
/// PSA_PORT_CPU.
pub const PSA_PORT_CPU: u32 = 0xffff_fffd;

use crate::interp::check::{P4Error, Prog, Ty};
use crate::interp::eval::{Ctl, Run, PKT_IN, PKT_OUT};
use crate::interp::{Outcome, State};
use crate::trace::Trace;
use crate::value::FastMap as HashMap;
use crate::value::{mask, Bits, Src, Value};
use std::sync::Arc;

/// The architecture of a checked program, from its `main` package.
pub(crate) fn detect(p: &Prog) -> Result<Arch, P4Error> {
    let n = p.main_blocks.len();
    match (p.package.as_str(), n) {
        ("PNA_NIC", 3) => Ok(Arch::PnaTc),
        ("PNA_NIC", 4) => Ok(Arch::Pna),
        ("V1Switch", 6) => Ok(Arch::V1Model),
        ("PSA_Switch", 6) => Ok(Arch::Psa),
        (pkg, n) => Err(P4Error::Arch(format!(
            "unsupported: main package {pkg} with {n} programmable blocks (PNA_NIC, V1Switch, PSA_Switch)"
        ))),
    }
}

/// Values shared by the blocks of one pass, by type name (the header
/// struct, user metadata, standard_metadata, ...).
#[derive(Clone)]
struct Shared {
    vals: HashMap<String, Value>,
}

pub(crate) fn ty_key(t: &Ty) -> String {
    ty_key_ref(t).into_owned()
}

/// [`ty_key`] borrowed where the type has a name (headers, structs,
/// named types): the per-block lookups of shared values allocate nothing.
fn ty_key_ref(t: &Ty) -> std::borrow::Cow<'_, str> {
    match t {
        Ty::Header(a) | Ty::Struct(a) => std::borrow::Cow::Borrowed(&a.name),
        Ty::Named(n) => std::borrow::Cow::Borrowed(n.as_str()),
        o => std::borrow::Cow::Owned(format!("{o:?}")),
    }
}

fn set_field(v: &mut Value, name: &str, val: u128, src: Src) {
    if let Some(f) = v.field_mut(name) {
        match f {
            Value::Bits(b) => {
                b.v = val & mask(b.width);
                b.src = src;
            }
            Value::Bool(b, s) => {
                *b = val != 0;
                *s = src;
            }
            _ => {}
        }
    }
}

fn get_field(v: &Value, name: &str) -> Option<u128> {
    v.field(name).and_then(|f| match f {
        Value::Bool(b, _) => Some(*b as u128),
        o => o.as_u128(),
    })
}

fn set_enum_field(v: &mut Value, name: &str, member: &str) {
    if let Some(Value::Enum(_, m)) = v.field_mut(name) {
        if **m != *member {
            *m = Arc::from(member);
        }
    }
}

struct Ctx {
    in_port: u32,
    pass: u32,
    egress_port: u32,
    /// v1model instance_type.
    itype: u32,
    /// Length in bytes of the packet entering the pass.
    len: u32,
    /// PSA packet_path member.
    path: &'static str,
}

/// Initial value of an architecture metadata struct.
fn init_meta(arch: Arch, key: &str, v: &mut Value, c: &Ctx) {
    let port_src = if c.pass == 0 {
        Src::InPort
    } else {
        Src::Tainted("p4-recirculate")
    };
    match key {
        "pna_main_parser_input_metadata_t"
        | "pna_main_input_metadata_t"
        | "pna_pre_input_metadata_t" => {
            set_field(v, "input_port", c.in_port as u128, port_src);
            set_field(v, "timestamp", 0, Src::Tainted("p4-timestamp"));
            set_field(v, "recirculated", (c.pass > 0) as u128, Src::None);
            // Packets enter from the network side.
            set_enum_field(v, "direction", "NET_TO_HOST");
        }
        "standard_metadata_t" => {
            set_field(v, "ingress_port", c.in_port as u128, port_src);
            set_field(
                v,
                "packet_length",
                c.len as u128,
                Src::Tainted("p4-packet-length"),
            );
            // Queueing state: per packet, never cacheable.
            set_field(v, "enq_qdepth", 0, Src::Tainted("p4-metadata:enq_qdepth"));
            set_field(v, "deq_qdepth", 0, Src::Tainted("p4-metadata:deq_qdepth"));
            set_field(
                v,
                "deq_timedelta",
                0,
                Src::Tainted("p4-metadata:deq_timedelta"),
            );
            set_field(
                v,
                "ingress_global_timestamp",
                0,
                Src::Tainted("p4-timestamp"),
            );
            set_field(v, "enq_timestamp", 0, Src::Tainted("p4-timestamp"));
            set_field(
                v,
                "egress_global_timestamp",
                0,
                Src::Tainted("p4-timestamp"),
            );
            set_field(v, "instance_type", c.itype as u128, Src::None);
        }
        "psa_ingress_parser_input_metadata_t" | "psa_ingress_input_metadata_t" => {
            set_field(v, "ingress_port", c.in_port as u128, port_src);
            set_enum_field(v, "packet_path", c.path);
            set_field(v, "ingress_timestamp", 0, Src::Tainted("p4-timestamp"));
        }
        "psa_ingress_output_metadata_t" => {
            set_field(v, "drop", 1, Src::None);
        }
        "psa_egress_parser_input_metadata_t"
        | "psa_egress_input_metadata_t"
        | "psa_egress_deparser_input_metadata_t" => {
            set_field(v, "egress_port", c.egress_port as u128, Src::None);
            set_enum_field(v, "packet_path", c.path);
            set_field(v, "instance", c.itype as u128, Src::None);
            set_field(v, "egress_timestamp", 0, Src::Tainted("p4-timestamp"));
        }
        _ => {}
    }
    let _ = arch;
}

/// One block invocation with shared values.
fn run_block(
    run: &mut Run,
    arch: Arch,
    shared: &mut Shared,
    b: usize,
    c: &Ctx,
) -> Result<(bool, Option<String>), Ctl> {
    let p = run.p;
    let blk = &p.blocks[b];
    let mut vals = run.st.pool.data.pop().unwrap_or_default();
    vals.clear();
    // Each parameter's key, owned when it was taken out of the map (given
    // back on write-back: no String per block and packet).
    // The third member: a key reused from the pipeline's spare values.
    #[allow(clippy::type_complexity)]
    let mut keys: Vec<(std::borrow::Cow<'_, str>, Option<String>, Option<String>)> =
        Vec::with_capacity(blk.param_tys.len());
    for (prm, t) in blk.params().iter().zip(&blk.param_tys) {
        let key = ty_key_ref(t);
        let mut owned_key = None;
        let mut spare_key: Option<String> = None;
        let shared_once = blk
            .param_tys
            .iter()
            .filter(|t| ty_key_ref(t) == key)
            .count()
            == 1;
        let v = match &*key {
            "packet_in" => Value::Instance(PKT_IN),
            "packet_out" => Value::Instance(PKT_OUT),
            _ => {
                let taken = match prm.direction {
                    // Written back after the block: moved in, not copied
                    // (the headers and metadata are the bulk of a packet's
                    // allocations).
                    crate::ast::Direction::Out | crate::ast::Direction::InOut if shared_once => {
                        shared.vals.remove_entry(&*key).map(|(k, v)| {
                            owned_key = Some(k);
                            v
                        })
                    }
                    _ => shared.vals.get(&*key).cloned(),
                };
                match taken {
                    Some(mut v) => {
                        if prm.direction == crate::ast::Direction::Out {
                            // `out` parameters start uninitialised (headers invalid).
                            v.reset();
                        }
                        v
                    }
                    None => {
                        // The value the last packet left under this key,
                        // reset to the default (no fresh allocation).
                        let spare = if run.reference {
                            None
                        } else {
                            run.st.pool.shared_spare.remove_entry(&*key)
                        };
                        let mut v = match spare {
                            Some((k, mut v)) => {
                                spare_key = Some(k);
                                t.reset_value(&mut v);
                                v
                            }
                            None => t.default_value(),
                        };
                        init_meta(arch, &key, &mut v, c);
                        v
                    }
                }
            }
        };
        vals.push(v);
        keys.push((key, owned_key, spare_key));
    }
    let (mut vals, rejected, exited) = run_block_outcome(run, b, vals)?;
    for ((prm, (key, owned, spare)), v) in blk.params().iter().zip(keys).zip(vals.drain(..)) {
        if key == "packet_in" || key == "packet_out" {
            continue;
        }
        if let Some(k) = owned {
            shared.vals.insert(k, v);
        } else if prm.direction != crate::ast::Direction::In {
            if let Some(slot) = shared.vals.get_mut(&*key) {
                *slot = v;
            } else {
                shared
                    .vals
                    .insert(spare.unwrap_or_else(|| key.into_owned()), v);
            }
        } else if !shared.vals.contains_key(&*key) {
            shared
                .vals
                .insert(spare.unwrap_or_else(|| key.into_owned()), v);
        }
    }
    if run.st.pool.data.len() < 16 {
        run.st.pool.data.push(vals);
    }
    Ok((exited, rejected))
}

/// [`run_block`] of main block number `pos` (in `Prog::main_blocks`) with
/// the shared values in `slots` (by the layout compiled at load) instead
/// of a map keyed by type name: the same values taken, reset, initialised
/// and written back, without hashing a name per parameter and block.
/// `spare`: the values the last packet left, reset and reused.
fn run_block_slots<'a>(
    run: &mut Run<'a>,
    arch: Arch,
    layout: &crate::interp::fast::SharedLayout,
    slots: &mut [Option<Value>],
    spare: &mut [Option<Value>],
    pos: usize,
    c: &Ctx,
) -> Result<(bool, Option<String>), Ctl> {
    use crate::interp::fast::ParamSlot;
    let p: &'a Prog = run.p;
    let b = block_at(run, pos);
    let blk = &p.blocks[b];
    let Some(ps) = layout.params.get(pos) else {
        return Err(Ctl::Fail("no slot layout for a main block".into()));
    };
    // The parameters bound straight into the block's frame and written
    // back from it (no parameter vector in between: each 64-byte value
    // moves once in and once out). Only the parameters the block names
    // are in the frame (the flat headers and unnamed metadata get no
    // entry: names are searched, never positions, and the write-back
    // below skips the same parameters), so a block that binds nothing
    // (routing.p4's main control) pushes and drains nothing; it was four
    // 80-byte placeholder entries per block and packet.
    let mut frame = run.new_frame();
    let flat = run.code().and_then(|c| c.flat.as_ref());
    let saved_root = run.flat_root;
    for ((prm, t), ps) in blk.params().iter().zip(&blk.param_tys).zip(ps) {
        let v = match *ps {
            ParamSlot::PktIn => Value::Instance(PKT_IN),
            ParamSlot::PktOut => Value::Instance(PKT_OUT),
            ParamSlot::Shared { slot, .. } if flat.is_some_and(|f| f.slot == slot) => {
                // The flat headers: nothing bound (the compiled chains
                // read and write `pool.flat`); an `out` parameter starts
                // reset, as the tree would.
                if let Some(fl) = flat {
                    if prm.direction == crate::ast::Direction::Out {
                        run.st.pool.flat.reset(fl);
                    }
                }
                run.flat = flat;
                run.flat_root = prm.name.name.as_str();
                continue;
            }
            ParamSlot::Shared {
                slot,
                unnamed: true,
                ..
            } => {
                // Named nowhere in the block: nothing bound; the slot
                // keeps its value for the next block (reset for an `out`
                // parameter, as binding it would; an empty slot is
                // initialised by the first block that names it, as here).
                if prm.direction == crate::ast::Direction::Out {
                    if let Some(v) = slots[slot].as_mut() {
                        v.reset();
                    }
                }
                continue;
            }
            ParamSlot::Shared { slot, once, .. } => {
                let taken = match prm.direction {
                    crate::ast::Direction::Out | crate::ast::Direction::InOut if once => {
                        slots[slot].take()
                    }
                    _ => match &slots[slot] {
                        Some(v) => {
                            let mut d = run
                                .st
                                .pool
                                .in_spare
                                .get_mut(slot)
                                .and_then(Option::take)
                                .unwrap_or(Value::Void);
                            v.clone_into_value(&mut d);
                            Some(d)
                        }
                        None => None,
                    },
                };
                match taken {
                    Some(mut v) => {
                        if prm.direction == crate::ast::Direction::Out {
                            v.reset();
                        }
                        v
                    }
                    None => {
                        let mut v = match spare[slot].take() {
                            Some(mut v) => {
                                t.reset_value(&mut v);
                                v
                            }
                            None => t.default_value(),
                        };
                        init_meta(arch, &layout.keys[slot], &mut v, c);
                        v
                    }
                }
            }
        };
        frame.push((prm.name.name.as_str(), v));
    }
    let (mut frame, r) = run.run_block_frame(b, frame);
    run.flat_root = saved_root;
    let (rejected, exited) = match r {
        Ok(exited) => (None, exited),
        Err(Ctl::Reject(e)) => (Some(reject_error(e)), false),
        Err(e) => {
            run.recycle(frame);
            return Err(e);
        }
    };
    // The frame's entries are the bound parameters in parameter order:
    // the same parameters are skipped here as above.
    let mut bound = frame.drain(..);
    for (prm, ps) in blk.params().iter().zip(ps) {
        let slot = match *ps {
            ParamSlot::PktIn | ParamSlot::PktOut => {
                bound.next();
                continue;
            }
            ParamSlot::Shared { slot, unnamed, .. } => {
                if unnamed || flat.is_some_and(|f| f.slot == slot) {
                    continue;
                }
                slot
            }
        };
        let Some((_, v)) = bound.next() else {
            break;
        };
        // As the map: written back unless an `in` parameter's value is
        // already there.
        if prm.direction != crate::ast::Direction::In || slots[slot].is_none() {
            slots[slot] = Some(v);
        } else if let Some(x) = run.st.pool.in_spare.get_mut(slot) {
            // The copy, for the next packet's `in` copy.
            *x = Some(v);
        }
    }
    drop(bound);
    run.recycle(frame);
    Ok((exited, rejected))
}

/// Output frame: emitted headers + unparsed payload.
fn deparsed(run: &mut Run) -> Result<Vec<u8>, Ctl> {
    if run.out.bits % 8 != 0 {
        return Err(Ctl::Fail(
            "deparser emitted a number of bits that is not a multiple of 8".into(),
        ));
    }
    if run.pos % 8 != 0 {
        return Err(Ctl::Fail("parser stopped inside a byte".into()));
    }
    let hdr_bits = run.out.bits as u32;
    run.out.bits = 0;
    let start = (run.pos / 8) as usize;
    let payload = run.pkt.get(start..).unwrap_or(&[]);
    let out = if run.reference {
        let mut out = std::mem::take(&mut run.out.bytes);
        out.extend_from_slice(payload);
        out
    } else {
        // One allocation of the frame's size; the deparser's buffer is
        // kept for the next frame (`Pool::out`).
        let mut out = Vec::with_capacity(run.out.bytes.len() + payload.len());
        out.extend_from_slice(&run.out.bytes);
        out.extend_from_slice(payload);
        run.out.bytes.clear();
        out
    };
    let mut prov = std::mem::take(&mut run.prov);
    if !payload.is_empty() {
        // The payload is the packet's own only on the first pass.
        prov.push(crate::trace::EmitSpan {
            out: hdr_bits,
            len: payload.len() as u32 * 8,
            from: run.first_pass.then_some(run.pos as u32),
        });
    }
    if let Some(pp) = &run.pass_prov {
        // This frame was parsed from one an earlier pipeline built: its
        // bits' origins are that frame's.
        let mut mapped = Vec::with_capacity(prov.len());
        for s in &prov {
            match s.from {
                None => mapped.push(*s),
                Some(f) => {
                    let mut at = s.out;
                    for (n, from) in crate::trace::map_back(pp, f, s.len) {
                        mapped.push(crate::trace::EmitSpan {
                            out: at,
                            len: n,
                            from,
                        });
                        at += n;
                    }
                }
            }
        }
        prov = mapped;
    }
    run.tr.emitted = prov;
    run.tr.frames += 1;
    Ok(out)
}

fn set_parser_error(shared: &mut Shared, key: &str, err: &str) {
    if let Some(v) = shared.vals.get_mut(key) {
        if let Some(Value::Error(e, s)) = v.field_mut("parser_error") {
            *e = Arc::from(err);
            *s = Src::None;
        }
    }
}

/// Runs one packet through the architecture.
pub(crate) fn run_packet(
    p: &Prog,
    st: &mut State,
    arch: Arch,
    in_port: u32,
    packet: &[u8],
    now: u64,
    reference: bool,
) -> Outcome {
    let mut trace = Trace::default();
    let r = {
        let pkt = if reference {
            packet.to_vec()
        } else {
            let mut b = std::mem::take(&mut st.pool.pkt);
            b.clear();
            b.extend_from_slice(packet);
            b
        };
        if !reference {
            // The trace's vectors sized once for a usual packet instead of
            // grown push by push (4, 8, 16 ... each a reallocation).
            trace.read_bits.reserve(16);
            trace.tables.reserve(4);
        }
        let mut run = Run::new(p, st, &mut trace, pkt, in_port, now);
        run.reference = reference;
        if !reference {
            run.prov.reserve(32);
        }
        let r = match arch {
            Arch::Pna | Arch::PnaTc => run_pna(&mut run, arch),
            Arch::V1Model => run_v1(&mut run),
            Arch::Psa => run_psa(&mut run),
        };
        if !reference {
            run.recycle_buffers();
        }
        r
    };
    match r {
        Ok(outputs) => Outcome { outputs, trace },
        Err(e) => {
            trace.error = Some(match e {
                Ctl::Fail(m) => m,
                o => format!("{o:?}"),
            });
            Outcome {
                outputs: vec![],
                trace,
            }
        }
    }
}

fn block_at(run: &Run, i: usize) -> usize {
    run.p.main_blocks[i].1
}

fn run_pna(run: &mut Run, arch: Arch) -> Result<Vec<(u32, Vec<u8>)>, Ctl> {
    let c = Ctx {
        in_port: run.in_port,
        pass: 0,
        egress_port: 0,
        itype: 0,
        len: run.pkt.len() as u32,
        path: "NORMAL",
    };
    if let Some(code) = run.code() {
        let layout = &code.shared;
        let n = layout.keys.len();
        let mut slots = std::mem::take(&mut run.st.pool.slots);
        let mut spare = std::mem::take(&mut run.st.pool.slot_spare);
        slots.clear();
        slots.resize_with(n, || None);
        spare.resize_with(n, || None);
        run.st.pool.in_spare.resize_with(n, || None);
        if let Some(fl) = &code.flat {
            // Fresh headers for a first block that takes them `inout` or
            // not at all; a first block that takes them `out` (the usual
            // parser) resets them itself (`run_block_slots`), so they are
            // not reset twice per packet.
            let b0 = &run.p.blocks[block_at(run, 0)];
            let out_first = layout.params.first().is_some_and(|ps| {
                b0.params().iter().zip(ps).any(|(prm, s)| {
                    matches!(s, crate::interp::fast::ParamSlot::Shared { slot, .. } if *slot == fl.slot)
                        && prm.direction == crate::ast::Direction::Out
                })
            });
            if !out_first {
                run.st.pool.flat.reset(fl);
            }
        }
        let r = run_pna_slots(run, arch, layout, &mut slots, &mut spare, &c);
        run.flat = None;
        // Keep the headers and metadata for the next packet.
        for (s, x) in slots.iter_mut().zip(spare.iter_mut()) {
            if let Some(v) = s.take() {
                *x = Some(v);
            }
        }
        run.st.pool.slots = slots;
        run.st.pool.slot_spare = spare;
        return r;
    }
    let mut sh = Shared {
        vals: if run.reference {
            HashMap::default()
        } else {
            run.st.pool.shared_map.take().unwrap_or_default()
        },
    };
    let r = run_pna_blocks(run, arch, &mut sh, &c);
    if !run.reference {
        // Keep the headers and metadata (and the map) for the next packet.
        let pool = &mut run.st.pool;
        for (k, v) in sh.vals.drain() {
            pool.shared_spare.insert(k, v);
        }
        pool.shared_map = Some(sh.vals);
    }
    r
}

fn run_pna_blocks(
    run: &mut Run,
    arch: Arch,
    sh: &mut Shared,
    c: &Ctx,
) -> Result<Vec<(u32, Vec<u8>)>, Ctl> {
    let (_, rej) = run_block(run, arch, sh, block_at(run, 0), c)?;
    if rej.is_some() {
        // PNA: a parser error drops the packet.
        return Ok(vec![]);
    }
    let ctl = if arch == Arch::Pna {
        run_block(run, arch, sh, block_at(run, 1), c)?;
        2
    } else {
        1
    };
    run_block(run, arch, sh, block_at(run, ctl), c)?;
    run_block(run, arch, sh, block_at(run, ctl + 1), c)?;
    let bytes = deparsed(run)?;
    match run.fwd.pna_dest {
        Some(Some(port)) => Ok(vec![(port, bytes)]),
        // Neither send_to_port nor drop_packet: dropped here (targets differ).
        _ => Ok(vec![]),
    }
}

/// [`run_pna_blocks`] with the shared values in slots.
fn run_pna_slots(
    run: &mut Run,
    arch: Arch,
    layout: &crate::interp::fast::SharedLayout,
    slots: &mut [Option<Value>],
    spare: &mut [Option<Value>],
    c: &Ctx,
) -> Result<Vec<(u32, Vec<u8>)>, Ctl> {
    let (_, rej) = run_block_slots(run, arch, layout, slots, spare, 0, c)?;
    if rej.is_some() {
        // PNA: a parser error drops the packet.
        return Ok(vec![]);
    }
    let ctl = if arch == Arch::Pna {
        run_block_slots(run, arch, layout, slots, spare, 1, c)?;
        2
    } else {
        1
    };
    run_block_slots(run, arch, layout, slots, spare, ctl, c)?;
    run_block_slots(run, arch, layout, slots, spare, ctl + 1, c)?;
    let bytes = deparsed(run)?;
    match run.fwd.pna_dest {
        Some(Some(port)) => Ok(vec![(port, bytes)]),
        // Neither send_to_port nor drop_packet: dropped here (targets differ).
        _ => Ok(vec![]),
    }
}

/// One unit of v1model work: an ingress pass or an egress pass.
enum V1Job {
    Ingress {
        pkt: Vec<u8>,
        in_port: u32,
        itype: u32,
        /// User metadata to start with (preserved field lists).
        meta: Option<Value>,
    },
    Egress {
        sh: Shared,
        pkt: Vec<u8>,
        pos: u64,
        port: u32,
        itype: u32,
        rid: u32,
    },
}

/// A fresh copy of user metadata `m` keeping only the fields annotated
/// `@field_list(list)` (BMv2's preserving_field_list semantics; no list:
/// everything reset).
fn preserved(p: &Prog, m: &Value, list: Option<u64>) -> Value {
    let Value::Struct(name, _, vals) = m else {
        let mut v = m.clone();
        v.reset();
        return v;
    };
    let Some(agg) = p.g.aggs.get(&**name) else {
        let mut v = m.clone();
        v.reset();
        return v;
    };
    let mut out = Ty::Struct(agg.clone()).default_value();
    if let Value::Struct(_, _, outs) = &mut out {
        for (i, (o, v)) in outs.iter_mut().zip(vals).enumerate() {
            let keep =
                list.is_some_and(|l| agg.field_lists.get(i).is_some_and(|ls| ls.contains(&l)));
            if keep {
                *o = v.clone();
            } else if matches!(v, Value::Struct(..)) {
                *o = preserved(p, v, list);
            }
        }
    }
    out
}

/// BMv2 instance types (simple_switch's PktInstanceType).
const V1_NORMAL: u32 = 0;
const V1_I2E_CLONE: u32 = 1;
const V1_E2E_CLONE: u32 = 2;
const V1_RECIRC: u32 = 4;
const V1_REPLICATION: u32 = 5;
const V1_RESUBMIT: u32 = 6;

fn run_v1(run: &mut Run) -> Result<Vec<(u32, Vec<u8>)>, Ctl> {
    let mut queue = std::collections::VecDeque::new();
    queue.push_back(V1Job::Ingress {
        pkt: run.pkt.clone(),
        in_port: run.in_port,
        itype: V1_NORMAL,
        meta: None,
    });
    let meta_key = run.p.blocks[block_at(run, 2)]
        .param_tys
        .get(1)
        .map(ty_key)
        .unwrap_or_default();
    let mut outputs = Vec::new();
    let mut jobs = 0u32;
    while let Some(job) = queue.pop_front() {
        jobs += 1;
        if jobs > 4 * MAX_PASSES {
            return Err(Ctl::Fail(format!(
                "more than {} v1model passes (resubmit/recirculate/clone loop?)",
                4 * MAX_PASSES
            )));
        }
        match job {
            V1Job::Ingress {
                pkt,
                in_port,
                itype,
                meta,
            } => {
                let c = Ctx {
                    in_port,
                    pass: (jobs > 1) as u32,
                    egress_port: 0,
                    itype,
                    len: pkt.len() as u32,
                    path: "NORMAL",
                };
                run.first_pass = jobs == 1;
                run.pkt = pkt;
                run.pos = 0;
                run.fwd = Default::default();
                let mut sh = Shared {
                    vals: HashMap::default(),
                };
                if let Some(m) = meta {
                    sh.vals.insert(meta_key.clone(), m);
                }
                let (_, rej) = run_block(run, Arch::V1Model, &mut sh, block_at(run, 0), &c)?;
                if let Some(e) = &rej {
                    set_parser_error(&mut sh, "standard_metadata_t", e);
                }
                let parsed = (sh.clone(), run.pkt.clone(), run.pos);
                run.checksum_error = None;
                run_block(run, Arch::V1Model, &mut sh, block_at(run, 1), &c)?;
                if let Some(bad) = run.checksum_error {
                    if let Some(sm) = sh.vals.get_mut("standard_metadata_t") {
                        set_field(sm, "checksum_error", bad as u128, Src::Checksum);
                    }
                }
                run_block(run, Arch::V1Model, &mut sh, block_at(run, 2), &c)?;
                let fwd = std::mem::take(&mut run.fwd);
                let sm = sh
                    .vals
                    .get("standard_metadata_t")
                    .cloned()
                    .unwrap_or(Value::Void);
                if let Some(session) = fwd.clone {
                    if let Some(port) = run.st.mirror.get(&session).copied() {
                        let mut csh = parsed.0.clone();
                        if let Some(m) = sh.vals.get(&meta_key) {
                            csh.vals
                                .insert(meta_key.clone(), preserved(run.p, m, fwd.clone_list));
                        }
                        queue.push_back(V1Job::Egress {
                            sh: csh,
                            pkt: parsed.1.clone(),
                            pos: parsed.2,
                            port,
                            itype: V1_I2E_CLONE,
                            rid: 0,
                        });
                    }
                }
                if fwd.resubmit {
                    run.tr.set_uncacheable("p4-resubmit");
                    queue.push_back(V1Job::Ingress {
                        pkt: parsed.1.clone(),
                        in_port,
                        itype: V1_RESUBMIT,
                        meta: sh
                            .vals
                            .get(&meta_key)
                            .map(|m| preserved(run.p, m, fwd.resubmit_list)),
                    });
                    continue;
                }
                let grp = get_field(&sm, "mcast_grp").unwrap_or(0) as u32;
                if grp != 0 {
                    run.tr.set_uncacheable("p4-multicast");
                    let members = run.st.mcast.get(&grp).cloned().unwrap_or_default();
                    for (port, rid) in members {
                        queue.push_back(V1Job::Egress {
                            sh: sh.clone(),
                            pkt: run.pkt.clone(),
                            pos: run.pos,
                            port,
                            itype: V1_REPLICATION,
                            rid,
                        });
                    }
                    continue;
                }
                let egress_spec = get_field(&sm, "egress_spec").unwrap_or(0) as u32;
                if egress_spec == V1_DROP_PORT {
                    continue;
                }
                queue.push_back(V1Job::Egress {
                    sh,
                    pkt: run.pkt.clone(),
                    pos: run.pos,
                    port: egress_spec,
                    itype: V1_NORMAL,
                    rid: 0,
                });
            }
            V1Job::Egress {
                mut sh,
                pkt,
                pos,
                port,
                itype,
                rid,
            } => {
                let c = Ctx {
                    in_port: run.in_port,
                    pass: (jobs > 2) as u32,
                    egress_port: port,
                    itype,
                    len: run.pkt.len() as u32,
                    path: "NORMAL",
                };
                run.pkt = pkt;
                run.pos = pos;
                run.fwd = Default::default();
                if let Some(sm) = sh.vals.get_mut("standard_metadata_t") {
                    set_field(sm, "egress_port", port as u128, Src::None);
                    set_field(sm, "egress_spec", port as u128, Src::None);
                    set_field(sm, "instance_type", itype as u128, Src::None);
                    set_field(sm, "egress_rid", rid as u128, Src::None);
                }
                run_block(run, Arch::V1Model, &mut sh, block_at(run, 3), &c)?;
                let fwd = std::mem::take(&mut run.fwd);
                if let Some(session) = fwd.clone {
                    if let Some(mport) = run.st.mirror.get(&session).copied() {
                        let mut csh = sh.clone();
                        if let Some(m) = sh.vals.get(&meta_key) {
                            csh.vals
                                .insert(meta_key.clone(), preserved(run.p, m, fwd.clone_list));
                        }
                        queue.push_back(V1Job::Egress {
                            sh: csh,
                            pkt: run.pkt.clone(),
                            pos: run.pos,
                            port: mport,
                            itype: V1_E2E_CLONE,
                            rid: 0,
                        });
                    }
                }
                let sm = sh
                    .vals
                    .get("standard_metadata_t")
                    .cloned()
                    .unwrap_or(Value::Void);
                if get_field(&sm, "egress_spec").unwrap_or(0) as u32 == V1_DROP_PORT {
                    continue;
                }
                run_block(run, Arch::V1Model, &mut sh, block_at(run, 4), &c)?;
                run_block(run, Arch::V1Model, &mut sh, block_at(run, 5), &c)?;
                let bytes = deparsed(run)?;
                if fwd.recirculate {
                    run.tr.set_uncacheable("p4-recirculate");
                    queue.push_back(V1Job::Ingress {
                        pkt: bytes,
                        in_port: port,
                        itype: V1_RECIRC,
                        meta: sh
                            .vals
                            .get(&meta_key)
                            .map(|m| preserved(run.p, m, fwd.recirculate_list)),
                    });
                    continue;
                }
                outputs.push((port, bytes));
            }
        }
    }
    Ok(outputs)
}

/// One unit of PSA work.
enum PsaJob {
    Ingress {
        pkt: Vec<u8>,
        in_port: u32,
        path: &'static str,
    },
    Egress {
        pkt: Vec<u8>,
        port: u32,
        path: &'static str,
        instance: u32,
        /// Provenance of `pkt` when it is the first ingress pass's output
        /// (see [`crate::trace::EmitSpan`]).
        prov: Option<Vec<crate::trace::EmitSpan>>,
    },
}

fn run_psa(run: &mut Run) -> Result<Vec<(u32, Vec<u8>)>, Ctl> {
    let mut queue = std::collections::VecDeque::new();
    queue.push_back(PsaJob::Ingress {
        pkt: run.pkt.clone(),
        in_port: run.in_port,
        path: "NORMAL",
    });
    let mut outputs = Vec::new();
    let mut jobs = 0u32;
    while let Some(job) = queue.pop_front() {
        jobs += 1;
        if jobs > 4 * MAX_PASSES {
            return Err(Ctl::Fail(format!(
                "more than {} PSA passes (resubmit/recirculate loop?)",
                4 * MAX_PASSES
            )));
        }
        match job {
            PsaJob::Ingress { pkt, in_port, path } => {
                let c = Ctx {
                    in_port,
                    pass: (jobs > 1) as u32,
                    egress_port: 0,
                    itype: 0,
                    len: pkt.len() as u32,
                    path,
                };
                run.first_pass = jobs == 1;
                run.reparse_tag = "p4-recirculate";
                run.pkt = pkt;
                run.pos = 0;
                let original = run.pkt.clone();
                let mut sh = Shared {
                    vals: HashMap::default(),
                };
                let (_, rej) = run_block(run, Arch::Psa, &mut sh, block_at(run, 0), &c)?;
                if let Some(e) = &rej {
                    let key = "psa_ingress_input_metadata_t";
                    if !sh.vals.contains_key(key) {
                        if let Some(t) = p_type(run, block_at(run, 1), key) {
                            let mut v = t.default_value();
                            init_meta(Arch::Psa, key, &mut v, &c);
                            sh.vals.insert(key.into(), v);
                        }
                    }
                    set_parser_error(&mut sh, key, e);
                }
                run_block(run, Arch::Psa, &mut sh, block_at(run, 1), &c)?;
                run_block(run, Arch::Psa, &mut sh, block_at(run, 2), &c)?;
                let bytes = deparsed(run)?;
                let ostd = sh
                    .vals
                    .get("psa_ingress_output_metadata_t")
                    .cloned()
                    .unwrap_or(Value::Void);
                if get_field(&ostd, "clone").unwrap_or(0) != 0 {
                    // Clone sessions are not modelled for PSA.
                    run.tr.set_uncacheable("p4-clone");
                }
                if get_field(&ostd, "drop").unwrap_or(1) != 0 {
                    continue;
                }
                if get_field(&ostd, "resubmit").unwrap_or(0) != 0 {
                    run.tr.set_uncacheable("p4-resubmit");
                    queue.push_back(PsaJob::Ingress {
                        pkt: original,
                        in_port,
                        path: "RESUBMIT",
                    });
                    continue;
                }
                let grp = get_field(&ostd, "multicast_group").unwrap_or(0) as u32;
                if grp != 0 {
                    run.tr.set_uncacheable("p4-multicast");
                    for (port, rid) in run.st.mcast.get(&grp).cloned().unwrap_or_default() {
                        queue.push_back(PsaJob::Egress {
                            pkt: bytes.clone(),
                            port,
                            path: "NORMAL_MULTICAST",
                            instance: rid,
                            prov: None,
                        });
                    }
                    continue;
                }
                let port = get_field(&ostd, "egress_port").unwrap_or(0) as u32;
                queue.push_back(PsaJob::Egress {
                    pkt: bytes,
                    port,
                    path: "NORMAL_UNICAST",
                    instance: 0,
                    prov: (jobs == 1).then(|| run.tr.emitted.clone()),
                });
            }
            PsaJob::Egress {
                pkt,
                port,
                path,
                instance,
                prov,
            } => {
                let ce = Ctx {
                    in_port: run.in_port,
                    pass: 1,
                    egress_port: port,
                    itype: instance,
                    len: pkt.len() as u32,
                    path,
                };
                // The egress parser reads the ingress deparser's output:
                // after the first ingress pass its offsets map back to the
                // packet as received through that deparser's provenance;
                // otherwise its bits have no offset there.
                run.first_pass = prov.is_some();
                run.pass_prov = prov;
                run.reparse_tag = "p4-egress-reparse";
                run.pkt = pkt;
                run.pos = 0;
                let mut she = Shared {
                    vals: HashMap::default(),
                };
                let (_, rej) = run_block(run, Arch::Psa, &mut she, block_at(run, 3), &ce)?;
                if let Some(e) = &rej {
                    set_parser_error(&mut she, "psa_egress_input_metadata_t", e);
                }
                run_block(run, Arch::Psa, &mut she, block_at(run, 4), &ce)?;
                run_block(run, Arch::Psa, &mut she, block_at(run, 5), &ce)?;
                let bytes = deparsed(run);
                run.pass_prov = None;
                let bytes = bytes?;
                let eostd = she
                    .vals
                    .get("psa_egress_output_metadata_t")
                    .cloned()
                    .unwrap_or(Value::Void);
                if get_field(&eostd, "clone").unwrap_or(0) != 0 {
                    run.tr.set_uncacheable("p4-clone");
                }
                if get_field(&eostd, "drop").unwrap_or(0) != 0 {
                    continue;
                }
                if port == PSA_PORT_RECIRCULATE {
                    run.tr.set_uncacheable("p4-recirculate");
                    queue.push_back(PsaJob::Ingress {
                        pkt: bytes,
                        in_port: PSA_PORT_RECIRCULATE,
                        path: "RECIRCULATE",
                    });
                    continue;
                }
                outputs.push((port, bytes));
            }
        }
    }
    Ok(outputs)
}

fn p_type(run: &Run, b: usize, key: &str) -> Option<Ty> {
    run.p.blocks[b]
        .param_tys
        .iter()
        .find(|t| ty_key(t) == key)
        .cloned()
}

#[allow(dead_code)]
fn _bits(_: Bits) {}

/// Runs block `b` on `vals`: the parameters' values after it, the parser
/// error it rejected with (`NoError` for a bare reject), and whether it
/// exited. Other errors pass through.
fn run_block_outcome(
    run: &mut Run<'_>,
    b: usize,
    vals: Vec<Value>,
) -> super::eval::R<(Vec<Value>, Option<String>, bool)> {
    match run.run_block(b, vals) {
        Ok((v, e)) => Ok((v, None, e)),
        Err(Ctl::Reject(e)) => {
            let v = run.reject_vals.take().unwrap_or_default();
            Ok((v, Some(reject_error(e)), false))
        }
        Err(e) => Err(e),
    }
}

/// The parser error a reject carries (`NoError` for a bare reject).
fn reject_error(e: String) -> String {
    if e.is_empty() {
        "NoError".to_string()
    } else {
        e
    }
}
