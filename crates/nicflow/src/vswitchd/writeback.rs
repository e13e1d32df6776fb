//! What ovs-vswitchd writes back, and clients wait for: `cur_cfg` once a
//! configuration is applied (`ovs-vsctl` waits for it, then reads the
//! `ofport` and `error` of the interfaces it added), each interface's
//! port number or error and its kernel state, `Bridge.datapath_id`, the
//! types nicflow opens, and the `Datapath` rows' capabilities. Only
//! columns whose value differs from the replica are written, so a write
//! back does not cause another.

use super::desired::Desired;
use super::netdev;
use super::reconcile::{Applied, DATAPATH_TYPES, IFACE_TYPES};
use nicflow_ovsdb::{Atom, Columns, Condition, Datum, Op, Replica, Uuid};

/// `Datapath.capabilities`: what nicflow's datapath does, as OVS names
/// it (ofproto-dpif's `ofproto_dpif_get_capabilities`). Only what is
/// true: a key OVN asks for that nicflow cannot honour is `false`.
pub const CAPABILITIES: [(&str, &str); 10] = [
    ("recirc", "true"),
    ("ct_state", "true"),
    ("ct_zone", "true"),
    ("ct_mark", "true"),
    ("ct_label", "true"),
    ("ct_state_nat", "true"),
    ("ct_clear", "true"),
    // No all-zero SNAT step in nicflow's conntrack yet.
    ("ct_zero_snat", "false"),
    // NXT_CT_FLUSH (zone, protocol, original/reply tuples) is served;
    // ovn-controller 23.03 then flushes a removed load-balancer backend's
    // connections with it. A flush by mark or label is refused.
    ("ct_flush", "true"),
    // dp_hash: only OVS_HASH_ALG_L4.
    ("max_hash_alg", "0"),
];

fn int(i: i64) -> Datum {
    Datum::atom(Atom::Integer(i))
}

fn string(s: &str) -> Datum {
    Datum::atom(Atom::string(s))
}

fn strings<'a>(v: impl IntoIterator<Item = &'a str>) -> Datum {
    Datum::set(v.into_iter().map(Atom::string))
}

/// Add `col = value` to `row` if the replica holds something else.
fn set_if(cur: Option<&nicflow_ovsdb::Row>, row: &mut Columns, col: &str, value: Datum) {
    if cur.and_then(|r| r.get(col)) != Some(&value) {
        row.insert(col.to_string(), value);
    }
}

fn update(table: &str, uuid: Uuid, row: Columns, ops: &mut Vec<Op>) {
    if !row.is_empty() {
        ops.push(Op::Update {
            table: table.into(),
            conditions: vec![Condition::uuid(uuid)],
            row,
        });
    }
}

/// A controller target's connection state: (connections, their roles).
pub type ControllerStatus = std::collections::BTreeMap<String, (usize, Vec<String>)>;

/// The operations that bring the database's status columns up to date
/// (empty when nothing differs). `stats`: refresh `statistics` too.
/// `controllers`: per bridge, each target's state (from `get-controller`).
pub fn ops(
    r: &Replica,
    d: &Desired,
    applied: &Applied,
    stats: bool,
    controllers: &std::collections::BTreeMap<String, ControllerStatus>,
) -> Vec<Op> {
    let mut ops = Vec::new();
    for b in d.bridges.values() {
        for (u, target) in &b.controller_rows {
            let cur = r.row("Controller", u);
            let mut row = Columns::new();
            let st = controllers.get(&b.name).and_then(|c| c.get(target));
            let connected = st.is_some_and(|(n, _)| *n > 0);
            set_if(cur, &mut row, "is_connected", Datum::atom(connected));
            // OVS's names: an OpenFlow "equal" controller is "other".
            let role = st.and_then(|(_, roles)| roles.first()).map(|r| {
                if r == "equal" {
                    "other"
                } else {
                    r.as_str()
                }
            });
            set_if(
                cur,
                &mut row,
                "role",
                role.map_or_else(Datum::empty, string),
            );
            update("Controller", *u, row, &mut ops);
        }
        let ab = applied.bridges.get(&b.name);
        let cur = r.row("Bridge", &b.uuid);
        let mut row = Columns::new();
        if ab.is_some_and(|a| a.error.is_none()) {
            let dpid = crate::control::openflow::handle::datapath_id(&b.name);
            set_if(
                cur,
                &mut row,
                "datapath_id",
                string(&format!("{dpid:016x}")),
            );
        }
        update("Bridge", b.uuid, row, &mut ops);
        for i in b.ifaces.values() {
            let cur = r.row("Interface", &i.uuid);
            let mut row = Columns::new();
            let Some(a) = ab.and_then(|a| a.ifaces.get(&i.name)) else {
                continue;
            };
            match &a.result {
                Ok(no) => {
                    set_if(cur, &mut row, "ofport", int(i64::from(*no)));
                    // A patch port is open without its peer (it drops what
                    // it sends); OVS says so in `error`, in these words.
                    let peer = i.options.get("peer").filter(|_| i.kind == "patch");
                    let peer_open = |p: &String| {
                        applied.bridges.values().any(|b| {
                            b.ifaces
                                .get(p)
                                .is_some_and(|a| a.kind == "patch" && a.result.is_ok())
                        })
                    };
                    let error = match peer {
                        Some(p) if !peer_open(p) => {
                            let dp = if b.datapath_type.is_empty() {
                                "system"
                            } else {
                                &b.datapath_type
                            };
                            string(&format!("No usable peer '{p}' exists in '{dp}' datapath."))
                        }
                        _ => Datum::empty(),
                    };
                    set_if(cur, &mut row, "error", error);
                    let link = a
                        .netdev
                        .as_deref()
                        .filter(|_| matches!(i.kind.as_str(), "" | "system" | "internal"));
                    match link.and_then(netdev::link_info) {
                        Some(l) => {
                            set_if(cur, &mut row, "ifindex", int(l.ifindex));
                            set_if(cur, &mut row, "mac_in_use", string(&l.mac));
                            set_if(cur, &mut row, "mtu", int(l.mtu));
                            let st = |up| string(if up { "up" } else { "down" });
                            set_if(cur, &mut row, "admin_state", st(l.admin_up));
                            set_if(cur, &mut row, "link_state", st(l.link_up));
                        }
                        None => {
                            // A tunnel has no interface of its own (OVS
                            // writes ifindex 0 for it too).
                            set_if(cur, &mut row, "ifindex", int(0));
                            set_if(cur, &mut row, "admin_state", string("up"));
                            set_if(cur, &mut row, "link_state", string("up"));
                        }
                    }
                    if stats {
                        if let Some(dev) = link {
                            let s = netdev::statistics(dev);
                            let m = Datum::map(
                                s.into_iter()
                                    .map(|(k, v)| (Atom::string(k), Atom::Integer(v))),
                            );
                            set_if(cur, &mut row, "statistics", m);
                        }
                    }
                }
                Err(e) => {
                    set_if(cur, &mut row, "ofport", int(-1));
                    set_if(cur, &mut row, "error", string(e));
                    for c in ["ifindex", "mac_in_use", "mtu", "admin_state", "link_state"] {
                        set_if(cur, &mut row, c, Datum::empty());
                    }
                }
            }
            update("Interface", i.uuid, row, &mut ops);
        }
    }
    if let Some(root) = d.root {
        let cur = r.row("Open_vSwitch", &root);
        // Datapath rows (ovn-controller creates one per datapath type).
        if let Some(dps) = cur.and_then(|c| c.get("datapaths")) {
            for (_, v) in dps.pairs() {
                let Some(u) = v.as_uuid() else { continue };
                let dcur = r.row("Datapath", &u);
                let mut row = Columns::new();
                let caps = Datum::map(
                    CAPABILITIES
                        .iter()
                        .map(|(k, v)| (Atom::string(*k), Atom::string(*v))),
                );
                set_if(dcur, &mut row, "capabilities", caps);
                update("Datapath", u, row, &mut ops);
            }
        }
        let mut row = Columns::new();
        set_if(cur, &mut row, "iface_types", strings(IFACE_TYPES));
        set_if(cur, &mut row, "datapath_types", strings(DATAPATH_TYPES));
        // Last: clients that wait for cur_cfg then read what came before.
        set_if(cur, &mut row, "cur_cfg", int(d.next_cfg));
        update("Open_vSwitch", root, row, &mut ops);
    }
    ops
}
