//! The configuration the database asks for, read from the replica: bridges,
//! their interfaces and controllers. OVSDB is the source of truth under
//! `nicflow vswitchd`, so this is recomputed whole after every update and
//! the reconciler converges the switch to it (nothing is remembered from
//! earlier updates, so a reconnect or a restart converges the same way).

use nicflow_ovsdb::{Datum, Replica, Row, Uuid};
use std::collections::BTreeMap;

/// One `Interface` row as nicflow will open it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    pub uuid: Uuid,
    pub name: String,
    /// The database's `type` ("" means `system`).
    pub kind: String,
    pub options: BTreeMap<String, String>,
    pub ofport_request: Option<i64>,
    /// `mtu_request`: the MTU to set on the interface.
    pub mtu_request: Option<i64>,
    /// Why the row cannot be opened whatever the system offers (a bond),
    /// decided from the database alone.
    pub refused: Option<String>,
}

/// One `Bridge` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bridge {
    pub uuid: Uuid,
    pub name: String,
    pub datapath_type: String,
    /// `secure` or `standalone` (the default, as in OVS).
    pub fail_mode: String,
    /// `protocols`, comma-joined ("" when unset).
    pub protocols: String,
    /// `Controller.target` of the bridge's controllers, sorted.
    pub controllers: Vec<String>,
    /// The `Controller` rows (uuid, target), for their status.
    pub controller_rows: Vec<(Uuid, String)>,
    /// Interface name -> interface.
    pub ifaces: BTreeMap<String, Iface>,
}

/// Everything the database asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    pub bridges: BTreeMap<String, Bridge>,
    /// `Open_vSwitch.next_cfg` (what `cur_cfg` is set to once applied).
    pub next_cfg: i64,
    /// The root row.
    pub root: Option<Uuid>,
}

fn s(row: &Row, col: &str) -> String {
    row.get(col)
        .and_then(Datum::as_str)
        .unwrap_or_default()
        .to_string()
}

fn map(row: &Row, col: &str) -> BTreeMap<String, String> {
    row.get(col)
        .map(|d| {
            d.pairs()
                .iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn refs(row: &Row, col: &str) -> Vec<Uuid> {
    row.get(col)
        .map(|d| d.uuids().collect())
        .unwrap_or_default()
}

impl Desired {
    /// Read the replica. Bridges are those the root row lists (as OVS: a
    /// `Bridge` row no `Open_vSwitch.bridges` names is not configured), ports
    /// those their bridge lists.
    pub fn from_replica(r: &Replica) -> Desired {
        let mut d = Desired::default();
        let Some((root_uuid, root)) = r.rows("Open_vSwitch").next() else {
            return d;
        };
        d.root = Some(*root_uuid);
        d.next_cfg = root.get("next_cfg").and_then(Datum::as_int).unwrap_or(0);
        for bu in refs(root, "bridges") {
            let Some(b) = r.row("Bridge", &bu) else {
                continue;
            };
            let name = s(b, "name");
            if name.is_empty() || d.bridges.contains_key(&name) {
                continue;
            }
            let controller_rows: Vec<(Uuid, String)> = refs(b, "controller")
                .into_iter()
                .filter_map(|c| Some((c, s(r.row("Controller", &c)?, "target"))))
                .filter(|(_, t)| !t.is_empty())
                .collect();
            let mut controllers: Vec<String> =
                controller_rows.iter().map(|(_, t)| t.clone()).collect();
            controllers.sort();
            let protocols: Vec<String> = b
                .get("protocols")
                .map(|p| {
                    p.atoms()
                        .iter()
                        .filter_map(|a| a.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let mut br = Bridge {
                uuid: bu,
                name: name.clone(),
                datapath_type: s(b, "datapath_type"),
                fail_mode: match s(b, "fail_mode").as_str() {
                    "secure" => "secure".into(),
                    _ => "standalone".into(),
                },
                protocols: protocols.join(","),
                controllers,
                controller_rows,
                ifaces: BTreeMap::new(),
            };
            for pu in refs(b, "ports") {
                let Some(p) = r.row("Port", &pu) else {
                    continue;
                };
                let iface_uuids = refs(p, "interfaces");
                let bond = iface_uuids.len() > 1;
                for iu in iface_uuids {
                    let Some(i) = r.row("Interface", &iu) else {
                        continue;
                    };
                    let iname = s(i, "name");
                    // Interface names are unique (the schema's index), so
                    // only a bond is refused from the database alone.
                    let refused = bond.then(|| {
                        format!(
                            "port {}: bonds (several interfaces on one port) are not supported by nicflow",
                            s(p, "name")
                        )
                    });
                    let kind = s(i, "type");
                    br.ifaces.insert(
                        iname.clone(),
                        Iface {
                            uuid: iu,
                            name: iname,
                            kind,
                            options: map(i, "options"),
                            ofport_request: i.get("ofport_request").and_then(Datum::as_int),
                            mtu_request: i.get("mtu_request").and_then(Datum::as_int),
                            refused,
                        },
                    );
                }
            }
            d.bridges.insert(name, br);
        }
        d
    }
}
