//! OpenFlow groups in `ovs-ofctl add-group` syntax: parse, validate, print.
//!
//! ```text
//! group_id=1,type=select,selection_method=hash,fields(nw_src,tcp_dst),bucket=weight:10,actions=output:2,bucket=actions=output:3
//! ```
//!
//! * `group_id=N` (0..=0xffffff00) and `type=all|select|indirect|fast_failover`
//!   (`ff` too) are required.
//! * `selection_method=hash|dp_hash|rr|wrr|splb` and
//!   `selection_method_param=N` (select groups only): `hash`/`dp_hash` pick
//!   one bucket per flow, `rr`/`wrr`/`splb` one per packet
//!   ([`SelectionMethod::per_packet`]); `fields=F` or
//!   `fields(F1,F2[=MASK],...)` only with
//!   `selection_method=hash`. Field names are those of the rule language plus
//!   OVS's `ip_src`, `ip_dst`, `eth_src`, `eth_dst`, `eth_type`, `ip_proto`,
//!   `tcp_src`, `tcp_dst`, `udp_src`, `udp_dst`, `sctp_src`, `sctp_dst`.
//! * Each `bucket=` runs to the next `bucket=`. Its pieces are
//!   `bucket_id:N`, `weight:N`, `watch_port:P`, `watch_group:G` (`:` or `=`),
//!   `actions=A` / `action=A`, and any other piece is an action — as OVS's
//!   `parse_bucket_str` reads it, so `bucket=output:1` and
//!   `bucket=weight:2,actions=output:1,output:2` both work. Every action of
//!   the rule language can appear, `ct(...)` and `group:N` included;
//!   `goto_table` cannot (a bucket is an action set: use `resubmit`).
//!   As in OVS, bucket actions are not checked against a rule's match (a
//!   `mod_tp_dst` is simply skipped on a packet without ports), but the
//!   actions of one bucket must be consistent with some protocol.
//! * `indirect` has exactly one bucket, `fast_failover` buckets need
//!   `watch_port` or `watch_group`, only `select` buckets may have a weight
//!   (default 1 there, 0 elsewhere); bucket ids default to the bucket's
//!   position and must be distinct.
//!
//! [`format_group`] prints the `ovs-ofctl dump-groups` form: `type=ff` for
//! fast failover, every bucket with its `bucket_id:`, `weight:` only when it
//! is not the default, then `actions=`. `parse_group(format_group(g)) == g`.

use crate::actions::parse_actions;
use crate::error::{err, LineError, RuleError};
use crate::format::format_actions;
use crate::lexer::{split_actions, split_key};
use crate::ports::{classify_port, format_port, resolve_name, PortMap, PortText};
use crate::values::{format_masked, full, parse_masked, parse_max};
use nicflow_flow::field::ValueKind;
use nicflow_flow::{ofp, Action, Field, Match};

/// Largest group id (`OFPG_MAX`).
pub const OFPG_MAX: u32 = 0xffff_ff00;
/// Largest bucket id (`OFPG15_BUCKET_MAX`).
pub const BUCKET_MAX: u32 = 0xffff_ff00;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupType {
    /// Every bucket, each on its own copy of the packet (flooding,
    /// multicast).
    All,
    /// One bucket chosen by a hash of the packet, in proportion to weight.
    Select,
    /// The one bucket (a shared next hop).
    Indirect,
    /// The first bucket whose watched port (or group) is live.
    FastFailover,
}

impl GroupType {
    /// The name `ovs-ofctl dump-groups` prints.
    pub fn name(self) -> &'static str {
        match self {
            GroupType::All => "all",
            GroupType::Select => "select",
            GroupType::Indirect => "indirect",
            GroupType::FastFailover => "ff",
        }
    }

    fn parse(s: &str) -> Option<GroupType> {
        Some(match s {
            "all" => GroupType::All,
            "select" => GroupType::Select,
            "indirect" => GroupType::Indirect,
            "ff" | "fast_failover" => GroupType::FastFailover,
            _ => return None,
        })
    }
}

/// `selection_method=` of a select group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelectionMethod {
    /// A hash of the group's `fields`.
    Hash,
    /// OVS's datapath hash; in nicflow a hash of the L3/L4 5-tuple, the same
    /// as no method at all.
    DpHash,
    /// Round robin per packet: the live buckets in turn, weights ignored
    /// (a weight of 0 still means never). A nicflow extension, for spraying
    /// one flow's packets over several paths.
    RoundRobin,
    /// Weighted round robin per packet: nginx's smooth weighted round robin
    /// over the buckets' weights (3:1 gives 3 packets in 4 to the first).
    Weighted,
    /// Congestion-aware per packet (SPLB): smooth weighted round robin over
    /// weights the daemon derives from each bucket's output port's measured
    /// congestion, so the least congested path takes most packets.
    Splb,
}

impl SelectionMethod {
    /// Every method, in the order error messages list them.
    pub const ALL: [SelectionMethod; 5] = [
        SelectionMethod::Hash,
        SelectionMethod::DpHash,
        SelectionMethod::RoundRobin,
        SelectionMethod::Weighted,
        SelectionMethod::Splb,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SelectionMethod::Hash => "hash",
            SelectionMethod::DpHash => "dp_hash",
            SelectionMethod::RoundRobin => "rr",
            SelectionMethod::Weighted => "wrr",
            SelectionMethod::Splb => "splb",
        }
    }

    /// The method named `s` (as `name` prints it).
    pub fn from_name(s: &str) -> Option<SelectionMethod> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Does the method choose per packet (so the choice is made by the
    /// datapath, not cached with the flow)?
    pub fn per_packet(self) -> bool {
        matches!(
            self,
            SelectionMethod::RoundRobin | SelectionMethod::Weighted | SelectionMethod::Splb
        )
    }
}

/// One field of `fields(...)`: hashed under `mask`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HashField {
    /// As written (lowercase): `tcp_dst` and `tp_dst` differ in their
    /// prerequisite.
    pub name: String,
    pub field: Field,
    /// `tcp_*`/`udp_*`/`sctp_*`: the IP protocol the packet must have for
    /// the field to count.
    pub proto: Option<u8>,
    pub mask: u128,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Bucket {
    pub bucket_id: u32,
    /// Select groups only; default 1 there (0 = never chosen), 0 elsewhere.
    pub weight: u16,
    pub watch_port: Option<u32>,
    pub watch_group: Option<u32>,
    /// Empty means the bucket drops its copy.
    pub actions: Vec<Action>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupSpec {
    pub group_id: u32,
    pub kind: GroupType,
    pub selection_method: Option<SelectionMethod>,
    pub selection_method_param: u64,
    /// With `selection_method=hash` only.
    pub fields: Vec<HashField>,
    pub buckets: Vec<Bucket>,
}

/// `N` of `group:N` or `group_id=N`.
pub(crate) fn parse_group_id(piece: &str, s: &str) -> Result<u32, RuleError> {
    parse_max(s, OFPG_MAX.into())
        .map(|v| v as u32)
        .map_err(|r| RuleError::new(piece, format!("group id: {r}")))
}

const FIELD_ALIASES: &[(&str, Field, Option<u8>)] = &[
    ("ip_src", Field::NwSrc, None),
    ("ip_dst", Field::NwDst, None),
    ("eth_src", Field::DlSrc, None),
    ("eth_dst", Field::DlDst, None),
    ("eth_type", Field::DlType, None),
    ("ip_proto", Field::NwProto, None),
    ("tcp_src", Field::TpSrc, Some(6)),
    ("tcp_dst", Field::TpDst, Some(6)),
    ("udp_src", Field::TpSrc, Some(17)),
    ("udp_dst", Field::TpDst, Some(17)),
    ("sctp_src", Field::TpSrc, Some(132)),
    ("sctp_dst", Field::TpDst, Some(132)),
];

/// `fields=F` / `fields(F1,F2=MASK)`, OVS's `parse_select_group_field`.
fn parse_fields(piece: &str, body: &str) -> Result<Vec<HashField>, RuleError> {
    let mut out: Vec<HashField> = Vec::new();
    for a in split_actions(body)? {
        let (name, value) = match a.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (a, None),
        };
        let name = name.to_ascii_lowercase();
        let (field, proto) = match FIELD_ALIASES.iter().find(|(n, _, _)| *n == name) {
            Some((_, f, p)) => (*f, *p),
            None => (
                Field::from_name(&name)
                    .map_err(|_| RuleError::new(a, format!("unknown field {name}")))?,
                None,
            ),
        };
        if out.iter().any(|h| h.name == name) {
            return err(a, format!("{name}: duplicate field"));
        }
        let mask = match value {
            None => field.full_mask(),
            Some(v) => {
                let (m, _) = parse_masked(field.kind(), field.bits(), v, false)
                    .map_err(|r| RuleError::new(a, r))?;
                if m == 0 {
                    return err(a, "values are wildcards here and must not be all-zeros");
                }
                m
            }
        };
        out.push(HashField {
            name,
            field,
            proto,
            mask,
        });
    }
    if out.is_empty() {
        return err(piece, "fields needs at least one field");
    }
    Ok(out)
}

/// Parse one protocol's worth of bucket actions: bucket actions are not
/// checked against a rule's match (OVS checks them against none), so they
/// are accepted if they are consistent with some protocol.
fn parse_bucket_actions(text: &str, ports: &dyn PortMap) -> Result<Vec<Action>, RuleError> {
    // (dl_type, nw_proto)
    const PROTOS: &[(u16, Option<u8>)] = &[
        (0x0800, Some(6)),
        (0x0800, Some(17)),
        (0x0800, Some(132)),
        (0x0800, Some(1)),
        (0x86dd, Some(6)),
        (0x86dd, Some(17)),
        (0x86dd, Some(132)),
        (0x86dd, Some(58)),
        (0x0806, None),
        (0x0800, None),
        (0x86dd, None),
    ];
    let first = match parse_actions(text, ports, &Match::catchall(), 0) {
        Ok(a) => return check_bucket_actions(text, a),
        Err(e) => e,
    };
    // A prerequisite error may hide a plain mistake later in the list:
    // report the first error that is not about a prerequisite.
    let prereq = |e: &RuleError| e.reason.contains(" requires ");
    let mut other = None;
    for (dl, proto) in PROTOS {
        let mut m = Match::catchall();
        m.set(Field::DlType, u128::from(*dl), 0xffff);
        if let Some(p) = proto {
            m.set(Field::NwProto, u128::from(*p), 0xff);
        }
        match parse_actions(text, ports, &m, 0) {
            Ok(a) => return check_bucket_actions(text, a),
            Err(e) if other.is_none() && !prereq(&e) => other = Some(e),
            Err(_) => {}
        }
    }
    Err(if prereq(&first) {
        other.unwrap_or(first)
    } else {
        first
    })
}

fn check_bucket_actions(text: &str, a: Vec<Action>) -> Result<Vec<Action>, RuleError> {
    if a.iter().any(|x| matches!(x, Action::WriteMetadata { .. })) {
        let tok = split_actions(text)?
            .into_iter()
            .find(|p| p.to_ascii_lowercase().starts_with("write_metadata"))
            .unwrap_or(text);
        return err(tok, "write_metadata cannot be used in a group bucket");
    }
    if a.iter().any(Action::is_goto) {
        let tok = split_actions(text)?
            .into_iter()
            .find(|p| p.to_ascii_lowercase().starts_with("goto_table"))
            .unwrap_or(text);
        return err(
            tok,
            "goto_table cannot be used in a group bucket (use resubmit)",
        );
    }
    Ok(a)
}

/// A port of `watch_port:`; `ANY`/`NONE` mean none.
fn watch_port(piece: &str, s: &str, ports: &dyn PortMap) -> Result<Option<u32>, RuleError> {
    match classify_port(s) {
        Ok(PortText::Number(n)) => Ok(Some(n)),
        Ok(PortText::Reserved(ofp::NONE)) => Ok(None),
        Ok(PortText::Reserved(ofp::LOCAL)) => Ok(Some(ofp::LOCAL)),
        Ok(PortText::Reserved(_)) => err(piece, "invalid watch_port"),
        Ok(PortText::Name) if s.eq_ignore_ascii_case("any") => Ok(None),
        Ok(PortText::Name) => resolve_name(s, ports, true)
            .map(Some)
            .map_err(|r| RuleError::new(piece, r)),
        Err(r) => err(piece, r),
    }
}

/// One bucket's text (after `bucket=`).
fn parse_bucket(
    whole: &str,
    text: &str,
    kind: GroupType,
    index: usize,
    ports: &dyn PortMap,
) -> Result<Bucket, RuleError> {
    let mut b = Bucket {
        bucket_id: index as u32,
        weight: if kind == GroupType::Select { 1 } else { 0 },
        watch_port: None,
        watch_group: None,
        actions: Vec::new(),
    };
    let mut acts: Vec<&str> = Vec::new();
    let mut weight_piece = None;
    for piece in split_actions(text)? {
        let (name, delim, arg) = split_key(piece);
        let kv = matches!(delim, Some(':') | Some('='));
        match name.to_ascii_lowercase().as_str() {
            "weight" if kv => {
                b.weight = parse_max(arg, 0xffff).map_err(|r| RuleError::new(piece, r))? as u16;
                weight_piece = Some(piece);
            }
            "watch_port" if kv => b.watch_port = watch_port(piece, arg, ports)?,
            "watch_group" if kv => {
                let g = parse_max(arg, u32::MAX.into()).map_err(|r| RuleError::new(piece, r))?;
                if g == u128::from(u32::MAX) {
                    b.watch_group = None;
                } else if g > u128::from(OFPG_MAX) {
                    return err(piece, format!("invalid watch_group id {g}"));
                } else {
                    b.watch_group = Some(g as u32);
                }
            }
            "bucket_id" if kv => {
                b.bucket_id = parse_max(arg, BUCKET_MAX.into())
                    .map_err(|r| RuleError::new(piece, format!("invalid bucket_id: {r}")))?
                    as u32;
            }
            "actions" | "action" if kv => {
                if !arg.is_empty() {
                    acts.push(arg);
                }
            }
            _ => acts.push(piece),
        }
    }
    if acts.is_empty() {
        return err(whole, "bucket must specify actions");
    }
    if kind == GroupType::FastFailover && b.watch_port.is_none() && b.watch_group.is_none() {
        return err(
            whole,
            "fast failover bucket requires watch_port or watch_group",
        );
    }
    if kind != GroupType::Select && b.weight != 0 {
        return err(
            weight_piece.unwrap_or(whole),
            "Only select groups can have bucket weights.",
        );
    }
    b.actions = parse_bucket_actions(&acts.join(","), ports)?;
    Ok(b)
}

/// Byte offsets of every `bucket=` that starts a piece.
fn bucket_starts(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find("bucket=") {
        let at = from + i;
        let prev = text[..at].chars().next_back();
        if prev.is_none_or(|c| c == ',' || c.is_whitespace()) {
            out.push(at);
        }
        from = at + "bucket=".len();
    }
    out
}

/// Parse one group (`ovs-ofctl add-group` syntax; see the module docs).
pub fn parse_group(text: &str, ports: &dyn PortMap) -> Result<GroupSpec, RuleError> {
    let text = text.trim();
    let starts = bucket_starts(text);
    let head = &text[..starts.first().copied().unwrap_or(text.len())];
    let mut group_id = None;
    let mut kind = None;
    let mut method = None;
    let mut method_piece = "";
    let mut param = None;
    let mut fields: Option<(&str, Vec<HashField>)> = None;
    for piece in split_actions(head)? {
        let (name, delim, arg) = split_key(piece);
        match (name, delim) {
            ("group_id", Some('=')) => {
                if arg == "all" {
                    return err(piece, "group_id=all cannot be added");
                }
                group_id = Some(parse_group_id(piece, arg)?);
            }
            ("type", Some('=')) => {
                kind =
                    Some(GroupType::parse(arg).ok_or_else(|| {
                        RuleError::new(piece, format!("invalid group type {arg}"))
                    })?);
            }
            ("selection_method", Some('=')) => {
                method_piece = piece;
                method = Some(SelectionMethod::from_name(arg).ok_or_else(|| {
                    let names: Vec<&str> = SelectionMethod::ALL.iter().map(|m| m.name()).collect();
                    RuleError::new(
                        piece,
                        format!("unknown selection method {arg} ({})", names.join(", ")),
                    )
                })?);
            }
            ("selection_method_param", Some('=')) => {
                param = Some((
                    piece,
                    parse_max(arg, u64::MAX.into()).map_err(|r| RuleError::new(piece, r))? as u64,
                ));
            }
            ("fields", Some('=')) => fields = Some((piece, parse_fields(piece, arg)?)),
            ("fields", Some('(')) => {
                let Some(body) = arg.strip_suffix(')') else {
                    return err(piece, "malformed fields(...)");
                };
                fields = Some((piece, parse_fields(piece, body)?));
            }
            _ => return err(piece, format!("unknown keyword {name}")),
        }
    }
    let Some(group_id) = group_id else {
        return err(text, "must specify a group_id");
    };
    let Some(kind) = kind else {
        return err(text, "must specify a type");
    };
    if method.is_some() && kind != GroupType::Select {
        return err(
            method_piece,
            "selection_method is only allowed for select groups",
        );
    }
    if let Some((piece, _)) = &fields {
        if method != Some(SelectionMethod::Hash) {
            return err(
                piece,
                "fields may only be specified with \"selection_method=hash\"",
            );
        }
    }
    if let Some((piece, p)) = param {
        if method.is_none() && p != 0 {
            return err(
                piece,
                "selection_method_param is only allowed with \"selection_method\"",
            );
        }
    }
    let mut buckets: Vec<Bucket> = Vec::new();
    for (i, s) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(text.len());
        let whole = text[*s..end].trim_end_matches(|c: char| c == ',' || c.is_whitespace());
        let body = &whole["bucket=".len()..];
        let b = parse_bucket(whole, body, kind, i, ports)?;
        if buckets.iter().any(|o| o.bucket_id == b.bucket_id) {
            return err(whole, format!("duplicate bucket id {}", b.bucket_id));
        }
        buckets.push(b);
    }
    if kind == GroupType::Indirect && buckets.len() != 1 {
        return err(text, "an indirect group has exactly one bucket");
    }
    Ok(GroupSpec {
        group_id,
        kind,
        selection_method: method,
        selection_method_param: param.map_or(0, |p| p.1),
        fields: fields.map(|f| f.1).unwrap_or_default(),
        buckets,
    })
}

/// Parse a file of groups, one per line; blank lines and `#` comments are
/// skipped. All or nothing: the first bad line is reported with its number.
pub fn parse_groups(text: &str, ports: &dyn PortMap) -> Result<Vec<GroupSpec>, LineError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        out.push(parse_group(t, ports).map_err(|error| LineError { line: i + 1, error })?);
    }
    Ok(out)
}

/// The selector of `del-groups`: empty or `group_id=all` is every group
/// (`None`), `group_id=N` one.
pub fn parse_group_filter(text: &str) -> Result<Option<u32>, RuleError> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    let pieces = split_actions(t)?;
    let mut out = None;
    for piece in pieces {
        match split_key(piece) {
            ("group_id", Some('='), "all") => out = None,
            ("group_id", Some('='), v) => out = Some(parse_group_id(piece, v)?),
            _ => return err(piece, "del-groups takes only group_id=N or group_id=all"),
        }
    }
    Ok(out)
}

/// One bucket as `dump-groups` prints it (`bucket=bucket_id:0,...`).
pub fn format_bucket(b: &Bucket, kind: GroupType, ports: &dyn PortMap) -> String {
    let mut s = format!("bucket=bucket_id:{},", b.bucket_id);
    let default_weight = if kind == GroupType::Select { 1 } else { 0 };
    if b.weight != default_weight {
        s += &format!("weight:{},", b.weight);
    }
    if let Some(p) = b.watch_port {
        s += &format!("watch_port:{},", format_port(p, ports));
    }
    if let Some(g) = b.watch_group {
        s += &format!("watch_group:{g},");
    }
    s += "actions=";
    s += &format_actions(&b.actions, ports);
    s
}

/// A group as `ovs-ofctl dump-groups` prints it.
pub fn format_group(g: &GroupSpec, ports: &dyn PortMap) -> String {
    let mut s = format!("group_id={},type={}", g.group_id, g.kind.name());
    if let Some(m) = g.selection_method {
        s += &format!(",selection_method={}", m.name());
        if g.selection_method_param != 0 {
            s += &format!(",selection_method_param={}", g.selection_method_param);
        }
        let fields: Vec<String> = g
            .fields
            .iter()
            .map(|h| {
                let f = h.field;
                if h.mask == f.full_mask() {
                    h.name.clone()
                } else {
                    let kind = match f.kind() {
                        ValueKind::Int => ValueKind::Hex,
                        k => k,
                    };
                    format!(
                        "{}={}",
                        h.name,
                        format_masked(kind, f.bits(), h.mask, full(f.bits()))
                    )
                }
            })
            .collect();
        match fields.len() {
            0 => {}
            1 => s += &format!(",fields={}", fields[0]),
            _ => s += &format!(",fields({})", fields.join(",")),
        }
    }
    for b in &g.buckets {
        s.push(',');
        s += &format_bucket(b, g.kind, ports);
    }
    s
}
