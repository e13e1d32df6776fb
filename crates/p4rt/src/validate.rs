//! Checks of control-plane writes and reads against the loaded P4Info, done by
//! the server before anything reaches the target: unknown ids, missing or extra
//! key fields, values wider than their field, LPM/ternary values with bits
//! outside the prefix/mask, priorities, action scopes. Byte strings are
//! rewritten to P4Runtime's canonical form (no leading zero bytes) so targets
//! and reads see one spelling per value.

use tonic::Status;

use crate::p4info::{match_type, needs_priority, preamble_name, P4InfoIndex};
use crate::proto::p4::config::v1 as cfg;
use crate::proto::p4::v1 as p4;
use p4::entity::Entity as E;
use p4::field_match::FieldMatchType as FM;

/// Canonical form of a P4Runtime bitstring of width `bitwidth` (0: unknown
/// width, e.g. a translated type): leading zero bytes dropped, at least one
/// byte kept; INVALID_ARGUMENT when empty or wider than `bitwidth`.
pub fn canonical(
    bytes: &[u8],
    bitwidth: i32,
    what: &dyn Fn() -> String,
) -> Result<Vec<u8>, Status> {
    if bytes.is_empty() {
        return Err(Status::invalid_argument(format!(
            "{}: empty byte string",
            what()
        )));
    }
    let first = bytes
        .iter()
        .position(|b| *b != 0)
        .unwrap_or(bytes.len() - 1);
    let v = &bytes[first..];
    if bitwidth > 0 {
        let bits = (v.len() as i64 - 1) * 8 + (8 - v[0].leading_zeros() as i64);
        let bits = if v[0] == 0 { 0 } else { bits };
        if bits > bitwidth as i64 {
            return Err(Status::invalid_argument(format!(
                "{}: value 0x{} does not fit in {bitwidth} bits",
                what(),
                hex(bytes)
            )));
        }
    }
    Ok(v.to_vec())
}

/// Hex spelling for error messages.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Bit `i` (0 = least significant) of a big-endian byte string.
fn bit(v: &[u8], i: usize) -> bool {
    let byte = i / 8;
    byte < v.len() && (v[v.len() - 1 - byte] >> (i % 8)) & 1 == 1
}

fn cmp_unsigned(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let strip = |v: &[u8]| -> Vec<u8> { v.iter().skip_while(|x| **x == 0).copied().collect() };
    let (a, b) = (strip(a), strip(b));
    a.len().cmp(&b.len()).then_with(|| a.cmp(&b))
}

/// Checks a table key against the table's P4Info and canonicalizes it (fields
/// sorted by id, canonical byte strings). `wildcard` allows a partial key (reads).
pub fn check_match(
    table: &cfg::Table,
    entry: &mut p4::TableEntry,
    wildcard: bool,
) -> Result<(), Status> {
    use cfg::match_field::MatchType as M;
    let tname = preamble_name(&table.preamble).to_string();
    entry.r#match.sort_by_key(|m| m.field_id);
    for w in entry.r#match.windows(2) {
        if w[0].field_id == w[1].field_id {
            return Err(Status::invalid_argument(format!(
                "table {tname}: key field id {} given twice",
                w[0].field_id
            )));
        }
    }
    for fm in &mut entry.r#match {
        let Some(field) = table.match_fields.iter().find(|f| f.id == fm.field_id) else {
            return Err(Status::invalid_argument(format!(
                "table {tname}: no key field with id {}",
                fm.field_id
            )));
        };
        let w = field.bitwidth;
        let fname = format!("table {tname} key {}", field.name);
        let what = || fname.clone();
        let kind = match_type(field);
        match (&mut fm.field_match_type, kind) {
            (Some(FM::Exact(e)), M::Exact) => e.value = canonical(&e.value, w, &what)?,
            (Some(FM::Lpm(l)), M::Lpm) => {
                if l.prefix_len <= 0 || l.prefix_len > w {
                    return Err(Status::invalid_argument(format!(
                        "{fname}: prefix length {} not in 1..={w} (a zero-length prefix is expressed by omitting the field)",
                        l.prefix_len
                    )));
                }
                l.value = canonical(&l.value, w, &what)?;
                for i in 0..(w - l.prefix_len) as usize {
                    if bit(&l.value, i) {
                        return Err(Status::invalid_argument(format!(
                            "{fname}: value 0x{} has bits set beyond its /{} prefix",
                            hex(&l.value),
                            l.prefix_len
                        )));
                    }
                }
            }
            (Some(FM::Ternary(t)), M::Ternary) => {
                t.value = canonical(&t.value, w, &what)?;
                t.mask = canonical(&t.mask, w, &what)?;
                if t.mask.iter().all(|b| *b == 0) {
                    return Err(Status::invalid_argument(format!(
                        "{fname}: all-zero mask (a don't-care is expressed by omitting the field)"
                    )));
                }
                for i in 0..t.value.len() * 8 {
                    if bit(&t.value, i) && !bit(&t.mask, i) {
                        return Err(Status::invalid_argument(format!(
                            "{fname}: value 0x{} has bits outside mask 0x{}",
                            hex(&t.value),
                            hex(&t.mask)
                        )));
                    }
                }
            }
            (Some(FM::Range(r)), M::Range) => {
                r.low = canonical(&r.low, w, &what)?;
                r.high = canonical(&r.high, w, &what)?;
                if cmp_unsigned(&r.low, &r.high) == std::cmp::Ordering::Greater {
                    return Err(Status::invalid_argument(format!(
                        "{fname}: range low > high"
                    )));
                }
            }
            (Some(FM::Optional(o)), M::Optional) => o.value = canonical(&o.value, w, &what)?,
            (Some(FM::Other(_)), _) | (_, M::Unspecified) => {
                return Err(Status::unimplemented(format!(
                    "{fname}: architecture-specific match kinds"
                )))
            }
            (None, _) => return Err(Status::invalid_argument(format!("{fname}: no match value"))),
            (Some(_), k) => {
                return Err(Status::invalid_argument(format!(
                    "{fname}: match kind does not agree with the P4Info ({})",
                    k.as_str_name()
                )))
            }
        }
    }
    if !wildcard {
        for f in &table.match_fields {
            if match_type(f) == M::Exact && !entry.r#match.iter().any(|m| m.field_id == f.id) {
                return Err(Status::invalid_argument(format!(
                    "table {tname}: exact key field {} missing",
                    f.name
                )));
            }
        }
    }
    Ok(())
}

/// Checks an action call of a table entry (or a default action when `default`).
fn check_action(
    info: &cfg::P4Info,
    index: &P4InfoIndex,
    table: &cfg::Table,
    act: &mut p4::Action,
    default: bool,
) -> Result<(), Status> {
    let tname = preamble_name(&table.preamble);
    let Some(aref) = table.action_refs.iter().find(|r| r.id == act.action_id) else {
        return Err(Status::invalid_argument(format!(
            "table {tname}: action id {} is not one of its actions",
            act.action_id
        )));
    };
    let scope = cfg::action_ref::Scope::try_from(aref.scope).unwrap_or_default();
    // A valid action used outside its scope is PERMISSION_DENIED per the spec.
    if default && scope == cfg::action_ref::Scope::TableOnly {
        return Err(Status::permission_denied(format!(
            "table {tname}: action id {} is @tableonly",
            act.action_id
        )));
    }
    if !default && scope == cfg::action_ref::Scope::DefaultOnly {
        return Err(Status::permission_denied(format!(
            "table {tname}: action id {} is @defaultonly",
            act.action_id
        )));
    }
    let Some(action) = index.action(info, act.action_id) else {
        return Err(Status::invalid_argument(format!(
            "action id {} not in the P4Info",
            act.action_id
        )));
    };
    let aname = preamble_name(&action.preamble).to_string();
    act.params.sort_by_key(|p| p.param_id);
    for w in act.params.windows(2) {
        if w[0].param_id == w[1].param_id {
            return Err(Status::invalid_argument(format!(
                "action {aname}: parameter id {} given twice",
                w[0].param_id
            )));
        }
    }
    for p in &mut act.params {
        let Some(spec) = action.params.iter().find(|s| s.id == p.param_id) else {
            return Err(Status::invalid_argument(format!(
                "action {aname}: no parameter with id {}",
                p.param_id
            )));
        };
        let what = || format!("action {aname} parameter {}", spec.name);
        p.value = canonical(&p.value, spec.bitwidth, &what)?;
    }
    if let Some(missing) = action
        .params
        .iter()
        .find(|s| !act.params.iter().any(|p| p.param_id == s.id))
    {
        return Err(Status::invalid_argument(format!(
            "action {aname}: parameter {} missing",
            missing.name
        )));
    }
    Ok(())
}

/// Checks and canonicalizes a table entry for a write of type `ty`.
fn check_table_write(
    info: &cfg::P4Info,
    index: &P4InfoIndex,
    te: &mut p4::TableEntry,
    ty: p4::update::Type,
) -> Result<(), Status> {
    use p4::update::Type as T;
    let Some(table) = index.table(info, te.table_id) else {
        return Err(Status::not_found(format!(
            "no table with id {}",
            te.table_id
        )));
    };
    let tname = preamble_name(&table.preamble);
    if te.is_default_action {
        if !te.r#match.is_empty() || te.priority != 0 {
            return Err(Status::invalid_argument(format!(
                "table {tname}: a default entry has no key and no priority"
            )));
        }
        if ty != T::Modify {
            return Err(Status::invalid_argument(format!(
                "table {tname}: the default entry can only be modified, not {}",
                ty.as_str_name()
            )));
        }
        if table.const_default_action_id != 0 {
            return Err(Status::permission_denied(format!(
                "table {tname}: its default action is const"
            )));
        }
        return match &mut te.action {
            Some(p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(a)),
            }) => check_action(info, index, table, a, true),
            Some(_) => Err(Status::unimplemented(format!(
                "table {tname}: action profiles"
            ))),
            // No action: reset to the program's initial default action.
            None => Ok(()),
        };
    }
    // Const tables only take MODIFYs of an entry's direct resources (no action).
    let resources_only = table.is_const_table && ty == T::Modify && te.action.is_none();
    if table.is_const_table && !resources_only {
        return Err(Status::permission_denied(format!(
            "table {tname} is const: only direct resources of its entries may be modified"
        )));
    }
    check_match(table, te, false)?;
    let prio = needs_priority(table);
    if prio && te.priority <= 0 {
        return Err(Status::invalid_argument(format!(
            "table {tname}: entries need a priority > 0 (ternary/range/optional key)"
        )));
    }
    if !prio && te.priority != 0 {
        return Err(Status::invalid_argument(format!(
            "table {tname}: entries have no priority (exact/lpm key)"
        )));
    }
    if te.idle_timeout_ns != 0
        && table.idle_timeout_behavior != cfg::table::IdleTimeoutBehavior::NotifyControl as i32
    {
        return Err(Status::invalid_argument(format!(
            "table {tname}: idle timeout set but the table does not support idle timeouts"
        )));
    }
    if te.counter_data.is_some() && index.direct_counter_of(info, table).is_none() {
        return Err(Status::invalid_argument(format!(
            "table {tname}: counter_data set but the table has no direct counter"
        )));
    }
    if te.meter_config.is_some() && index.direct_meter_of(info, table).is_none() {
        return Err(Status::invalid_argument(format!(
            "table {tname}: meter_config set but the table has no direct meter"
        )));
    }
    if ty == T::Delete || resources_only {
        return Ok(());
    }
    match &mut te.action {
        Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(a)),
        }) => {
            if table.implementation_id != 0 {
                return Err(Status::invalid_argument(format!(
                    "table {tname} uses an action profile: direct actions not allowed"
                )));
            }
            check_action(info, index, table, a, false)
        }
        Some(p4::TableAction { r#type: Some(_) }) => {
            if table.implementation_id == 0 {
                return Err(Status::invalid_argument(format!(
                    "table {tname} has no action profile"
                )));
            }
            Ok(())
        }
        _ => Err(Status::invalid_argument(format!(
            "table {tname}: {} without action",
            ty.as_str_name()
        ))),
    }
}

fn check_index(
    idx: &Option<p4::Index>,
    size: i64,
    what: &str,
    required: bool,
) -> Result<(), Status> {
    match idx {
        Some(i) if i.index < 0 || i.index >= size => Err(Status::out_of_range(format!(
            "{what}: index {} not in 0..{size}",
            i.index
        ))),
        None if required => Err(Status::invalid_argument(format!("{what}: index missing"))),
        _ => Ok(()),
    }
}

/// Checks (and canonicalizes) one update against the P4Info. Returns the update type.
pub fn check_update(
    info: &cfg::P4Info,
    index: &P4InfoIndex,
    update: &mut p4::Update,
) -> Result<p4::update::Type, Status> {
    use p4::update::Type as T;
    let ty = match T::try_from(update.r#type) {
        Ok(T::Unspecified) | Err(_) => {
            return Err(Status::invalid_argument("update type unspecified"))
        }
        Ok(t) => t,
    };
    let Some(entity) = update.entity.as_mut().and_then(|e| e.entity.as_mut()) else {
        return Err(Status::invalid_argument("update without entity"));
    };
    let modify_only = |kind: &str| {
        if ty == T::Modify {
            Ok(ty)
        } else {
            Err(Status::invalid_argument(format!(
                "{kind} entries can only be modified, not {}",
                ty.as_str_name()
            )))
        }
    };
    match entity {
        E::TableEntry(te) => check_table_write(info, index, te, ty).map(|_| ty),
        E::CounterEntry(c) => {
            let Some(ctr) = index.counter(info, c.counter_id) else {
                return Err(Status::not_found(format!(
                    "no counter with id {}",
                    c.counter_id
                )));
            };
            check_index(&c.index, ctr.size, preamble_name(&ctr.preamble), false)?;
            modify_only("counter")
        }
        E::DirectCounterEntry(d) => {
            let te = d.table_entry.as_mut().ok_or_else(|| {
                Status::invalid_argument("direct counter entry without table entry")
            })?;
            let table = index
                .table(info, te.table_id)
                .ok_or_else(|| Status::not_found(format!("no table with id {}", te.table_id)))?;
            if index.direct_counter_of(info, table).is_none() {
                return Err(Status::invalid_argument(format!(
                    "table {} has no direct counter",
                    preamble_name(&table.preamble)
                )));
            }
            if !te.is_default_action {
                check_match(table, te, false)?;
            }
            modify_only("direct counter")
        }
        E::RegisterEntry(r) => {
            let Some(reg) = index.register(info, r.register_id) else {
                return Err(Status::not_found(format!(
                    "no register with id {}",
                    r.register_id
                )));
            };
            check_index(
                &r.index,
                reg.size as i64,
                preamble_name(&reg.preamble),
                false,
            )?;
            if r.data.is_none() {
                return Err(Status::invalid_argument(format!(
                    "register {}: no data",
                    preamble_name(&reg.preamble)
                )));
            }
            modify_only("register")
        }
        E::MeterEntry(m) => {
            let Some(meter) = index.meter(info, m.meter_id) else {
                return Err(Status::not_found(format!(
                    "no meter with id {}",
                    m.meter_id
                )));
            };
            check_index(&m.index, meter.size, preamble_name(&meter.preamble), false)?;
            modify_only("meter")
        }
        E::DirectMeterEntry(d) => {
            let te = d.table_entry.as_mut().ok_or_else(|| {
                Status::invalid_argument("direct meter entry without table entry")
            })?;
            let table = index
                .table(info, te.table_id)
                .ok_or_else(|| Status::not_found(format!("no table with id {}", te.table_id)))?;
            if index.direct_meter_of(info, table).is_none() {
                return Err(Status::invalid_argument(format!(
                    "table {} has no direct meter",
                    preamble_name(&table.preamble)
                )));
            }
            if !te.is_default_action {
                check_match(table, te, false)?;
            }
            modify_only("direct meter")
        }
        // Action profiles, PRE, value sets, digests, externs: the target decides.
        _ => Ok(ty),
    }
}

/// Checks the ids of a read request's entity (0 = wildcard where P4Runtime allows it).
pub fn check_read(
    info: &cfg::P4Info,
    index: &P4InfoIndex,
    entity: &mut p4::Entity,
) -> Result<(), Status> {
    let Some(e) = entity.entity.as_mut() else {
        return Err(Status::invalid_argument("read of an empty entity"));
    };
    match e {
        E::TableEntry(te) if te.table_id != 0 => {
            let table = index
                .table(info, te.table_id)
                .ok_or_else(|| Status::not_found(format!("no table with id {}", te.table_id)))?;
            check_match(table, te, true)
        }
        E::TableEntry(te) if !te.r#match.is_empty() || te.is_default_action => {
            Err(Status::invalid_argument(
                "a wildcard table read (table_id 0) cannot have a key or be a default-entry read",
            ))
        }
        E::CounterEntry(c) if c.counter_id != 0 => {
            let ctr = index
                .counter(info, c.counter_id)
                .ok_or_else(|| Status::not_found(format!("no counter with id {}", c.counter_id)))?;
            check_index(&c.index, ctr.size, preamble_name(&ctr.preamble), false)
        }
        E::RegisterEntry(r) if r.register_id != 0 => {
            let reg = index.register(info, r.register_id).ok_or_else(|| {
                Status::not_found(format!("no register with id {}", r.register_id))
            })?;
            check_index(
                &r.index,
                reg.size as i64,
                preamble_name(&reg.preamble),
                false,
            )
        }
        E::MeterEntry(m) if m.meter_id != 0 => {
            let meter = index
                .meter(info, m.meter_id)
                .ok_or_else(|| Status::not_found(format!("no meter with id {}", m.meter_id)))?;
            check_index(&m.index, meter.size, preamble_name(&meter.preamble), false)
        }
        E::DirectCounterEntry(d) => match d.table_entry.as_mut() {
            Some(te) if te.table_id != 0 => {
                let table = index.table(info, te.table_id).ok_or_else(|| {
                    Status::not_found(format!("no table with id {}", te.table_id))
                })?;
                check_match(table, te, true)
            }
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_strips_and_checks_width() {
        let w = || "f".to_string();
        assert_eq!(canonical(&[0, 0, 5], 9, &w).unwrap(), vec![5]);
        assert_eq!(canonical(&[0, 0], 9, &w).unwrap(), vec![0]);
        assert_eq!(canonical(&[1, 0xff], 9, &w).unwrap(), vec![1, 0xff]);
        assert!(canonical(&[2, 0], 9, &w).is_err());
        assert!(canonical(&[], 9, &w).is_err());
    }
}
