//! ADD, DEL and CHECK: a VF through the daemon's socket, addresses from
//! the IPAM plugin, configured inside the container's namespace.

use super::error::{code, CniError, CniResult};
use super::ipam;
use super::types::{parse_cidr, Interface, IpamResult, NetConf, Route};
use crate::control::daemon;
use crate::control::proto::{Request, Response};
use crate::lab::sys;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The `CNI_*` variables of one invocation.
#[derive(Clone, Debug)]
pub struct Env {
    pub container_id: String,
    /// `CNI_NETNS`: may be empty for DEL.
    pub netns: Option<String>,
    pub ifname: String,
    pub cni_path: String,
}

/// Default directory of the ADD records DEL reads.
pub const DATA_DIR: &str = "/var/lib/cni/nicflow";

/// What ADD made, kept for DEL: the VF is found again by namespace and
/// interface name, even when `CNI_NETNS` is no longer given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    bridge: String,
    namespace: String,
    ifname: String,
    representor: String,
}

fn record_path(conf: &NetConf, env: &Env) -> PathBuf {
    conf.data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DATA_DIR))
        .join(&conf.name)
        .join(format!("{}-{}.json", env.container_id, env.ifname))
}

fn io_err(what: &str, p: &Path, e: std::io::Error) -> CniError {
    CniError::new(code::IO_FAILURE, format!("{what} {}: {e}", p.display()))
}

fn write_record(path: &Path, r: &Record) -> CniResult<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| io_err("creating", d, e))?;
    }
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_string(r).expect("record serializes");
    std::fs::write(&tmp, text).map_err(|e| io_err("writing", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_err("writing", path, e))
}

fn read_record(path: &Path) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn remove_record(path: &Path) -> CniResult<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err("removing", path, e)),
        _ => Ok(()),
    }
}

/// The `ip netns` name of a `CNI_NETNS` path: a namespace file in
/// /run/netns (also reached as /var/run/netns), what `ip netns add`,
/// containerd, CRI-O and podman create.
pub fn netns_name(path: &str) -> CniResult<String> {
    let p = Path::new(path);
    let canon = p.canonicalize().map_err(|e| {
        CniError::new(
            code::UNKNOWN_CONTAINER,
            format!("network namespace {path}: {e}"),
        )
    })?;
    let run = Path::new("/run/netns")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from("/run/netns"));
    match (canon.parent(), canon.file_name().and_then(|n| n.to_str())) {
        (Some(dir), Some(name)) if dir == run => Ok(name.to_string()),
        _ => Err(CniError::new(
            code::INVALID_ENV,
            format!(
                "CNI_NETNS {path} is not a namespace file in /run/netns (an `ip netns` name); \
                 other paths such as /proc/PID/ns/net are not supported"
            ),
        )),
    }
}

/// [`netns_name`] for DEL, where the namespace may be gone already: the
/// file name of a path in /run/netns or /var/run/netns, whether or not it
/// still exists.
fn netns_name_lenient(path: &str) -> Option<String> {
    if let Ok(n) = netns_name(path) {
        return Some(n);
    }
    let p = Path::new(path);
    let dir = p.parent()?;
    if dir == Path::new("/run/netns") || dir == Path::new("/var/run/netns") {
        return p.file_name()?.to_str().map(str::to_string);
    }
    None
}

fn socket(conf: &NetConf) -> PathBuf {
    daemon::socket_path(conf.socket.clone())
}

/// One request; an unreachable daemon is "try again later" (code 11).
fn call(conf: &NetConf, req: &Request) -> CniResult<Response> {
    let sock = socket(conf);
    daemon::request(&sock, req).map_err(|e| {
        CniError::new(
            code::TRY_AGAIN_LATER,
            format!("nicflow daemon at {}: {e:#}", sock.display()),
        )
    })
}

/// The VF of `bridge` named `ifname` in namespace `ns`: (representor, MAC).
fn find_vf(
    conf: &NetConf,
    bridge: &str,
    ns: &str,
    ifname: &str,
) -> CniResult<Option<(String, String)>> {
    let r = call(conf, &Request::Show)?;
    if !r.ok {
        return Err(CniError::generic(format!(
            "nicflow show: {}",
            r.error.unwrap_or_default()
        )));
    }
    let empty = Vec::new();
    let bridges = r.data.as_array().unwrap_or(&empty);
    Ok(bridges
        .iter()
        .filter(|b| b["name"] == bridge)
        .flat_map(|b| b["vfs"].as_array().unwrap_or(&empty).iter())
        .find(|v| v["namespace"] == ns && v["name"] == ifname)
        .map(|v| {
            (
                v["representor"].as_str().unwrap_or_default().to_string(),
                v["mac"].as_str().unwrap_or_default().to_string(),
            )
        }))
}

/// Remove the VF whose representor is `rep`; already gone is fine.
fn del_vf(conf: &NetConf, bridge: &str, rep: &str) -> CniResult<()> {
    let r = call(
        conf,
        &Request::DelVf {
            bridge: bridge.to_string(),
            name: rep.to_string(),
        },
    )?;
    let err = r.error.unwrap_or_default();
    if r.ok || err.contains("has no VF") || err.contains("no bridge") {
        Ok(())
    } else {
        Err(CniError::generic(format!(
            "nicflow del-vf {bridge} {rep}: {err}"
        )))
    }
}

fn sys_err(e: impl std::fmt::Display) -> CniError {
    CniError::generic(e.to_string())
}

/// Addresses and routes of `res` on `ifname` in `ns`.
fn configure(ns: &str, ifname: &str, res: &IpamResult) -> CniResult<()> {
    for ip in &res.ips {
        let mut args = vec!["addr", "add", ip.address.as_str(), "dev", ifname];
        if ip.address.contains(':') {
            args.push("nodad");
        }
        sys::ip(Some(ns), &args).map_err(sys_err)?;
    }
    sys::ip(Some(ns), &["link", "set", "dev", ifname, "up"]).map_err(sys_err)?;
    for r in &res.routes {
        let gw = route_gateway(r, res);
        let mut args = vec!["route", "add", r.dst.as_str()];
        if let Some(g) = gw.as_deref() {
            args.extend(["via", g]);
        }
        args.extend(["dev", ifname]);
        sys::ip(Some(ns), &args).map_err(sys_err)?;
    }
    Ok(())
}

/// A route's gateway, or else the gateway of the first address of its
/// family (what the reference plugins do).
fn route_gateway(r: &Route, res: &IpamResult) -> Option<String> {
    if r.gw.is_some() {
        return r.gw.clone();
    }
    let v4 = parse_cidr(&r.dst).map(|(a, _)| a.is_ipv4()).ok()?;
    res.ips
        .iter()
        .filter(|ip| parse_cidr(&ip.address).is_ok_and(|(a, _)| a.is_ipv4() == v4))
        .find_map(|ip| ip.gateway.clone())
}

pub fn add(conf: &NetConf, env: &Env, stdin: &[u8]) -> CniResult<Value> {
    let netns = env
        .netns
        .as_deref()
        .ok_or_else(|| CniError::new(code::INVALID_ENV, "CNI_NETNS is required for ADD"))?;
    let ns = netns_name(netns)?;
    let r = call(
        conf,
        &Request::AddVf {
            bridge: conf.bridge.clone(),
            namespace: ns.clone(),
            name: Some(env.ifname.clone()),
            mac: None,
            ips: Vec::new(),
            rep_type: conf.rep_type.clone(),
        },
    )?;
    if !r.ok {
        return Err(CniError::generic(format!(
            "nicflow add-vf {} {ns} --name {}: {}",
            conf.bridge,
            env.ifname,
            r.error.unwrap_or_default()
        )));
    }
    let rep = r.data["representor"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mac = r.data["mac"].as_str().unwrap_or_default().to_string();
    let undo_vf = |e: CniError| {
        let _ = del_vf(conf, &conf.bridge, &rep);
        e
    };
    let rec_path = record_path(conf, env);
    write_record(
        &rec_path,
        &Record {
            bridge: conf.bridge.clone(),
            namespace: ns.clone(),
            ifname: env.ifname.clone(),
            representor: rep.clone(),
        },
    )
    .map_err(undo_vf)?;
    let undo = |e: CniError| {
        let _ = remove_record(&rec_path);
        undo_vf(e)
    };
    let res = match &conf.ipam {
        Some(i) => {
            let out = ipam::exec(&env.cni_path, &i.kind, "ADD", stdin).map_err(undo)?;
            let res = IpamResult::parse(&out).map_err(undo)?;
            if let Err(e) = configure(&ns, &env.ifname, &res) {
                let _ = ipam::exec(&env.cni_path, &i.kind, "DEL", stdin);
                return Err(undo(e));
            }
            res
        }
        None => IpamResult::default(),
    };
    let iface = Interface {
        name: env.ifname.clone(),
        mac,
        sandbox: netns.to_string(),
    };
    Ok(super::types::result_json(&conf.cni_version, &iface, &res))
}

/// Idempotent: IPAM DEL, then the VF if it is still there, then the
/// record. Missing namespace, VF, bridge or record are fine.
pub fn del(conf: &NetConf, env: &Env, stdin: &[u8]) -> CniResult<()> {
    let rec_path = record_path(conf, env);
    let rec = read_record(&rec_path);
    if let Some(i) = &conf.ipam {
        ipam::exec(&env.cni_path, &i.kind, "DEL", stdin)?;
    }
    let ns = rec
        .as_ref()
        .map(|r| r.namespace.clone())
        .or_else(|| env.netns.as_deref().and_then(netns_name_lenient));
    let bridge = rec
        .as_ref()
        .map_or(conf.bridge.as_str(), |r| r.bridge.as_str());
    if let Some(ns) = ns {
        if let Some((rep, _)) = find_vf(conf, bridge, &ns, &env.ifname)? {
            del_vf(conf, bridge, &rep)?;
        }
    }
    remove_record(&rec_path)
}

/// The interface is in the namespace with the VF's MAC, known to the
/// daemon, and carries the addresses of `prevResult`; the IPAM plugin's
/// CHECK agrees.
pub fn check(conf: &NetConf, env: &Env, stdin: &[u8]) -> CniResult<()> {
    if conf.cni_version == "0.3.1" {
        return Err(CniError::new(
            code::INCOMPATIBLE_VERSION,
            "CHECK needs cniVersion 0.4.0 or later",
        ));
    }
    let netns = env
        .netns
        .as_deref()
        .ok_or_else(|| CniError::new(code::INVALID_ENV, "CNI_NETNS is required for CHECK"))?;
    let ns = netns_name(netns)?;
    let (rep, mac) = find_vf(conf, &conf.bridge, &ns, &env.ifname)?.ok_or_else(|| {
        CniError::generic(format!(
            "bridge {} has no VF {} in namespace {ns}",
            conf.bridge, env.ifname
        ))
    })?;
    let out = sys::ip(Some(&ns), &["-j", "addr", "show", "dev", &env.ifname])
        .map_err(|e| CniError::generic(format!("interface {} in {netns}: {e}", env.ifname)))?;
    let link: Value = serde_json::from_str(&out).map_err(sys_err)?;
    let link = &link[0];
    if link["address"] != mac.as_str() {
        return Err(CniError::generic(format!(
            "{} in {netns} has MAC {}, VF {rep} has {mac}",
            env.ifname, link["address"]
        )));
    }
    let empty = Vec::new();
    let have: Vec<String> = link["addr_info"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
        .collect();
    if let Some(prev) = &conf.prev_result {
        let ours = prev["interfaces"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .position(|i| i["name"] == env.ifname.as_str() && i["sandbox"] == netns);
        for ip in prev["ips"].as_array().unwrap_or(&empty) {
            let idx = ip["interface"].as_u64().map(|i| i as usize);
            if idx.is_some() && idx != ours {
                continue;
            }
            let want = ip["address"].as_str().unwrap_or_default();
            let canon = parse_cidr(want).map(|(a, p)| format!("{a}/{p}"))?;
            if !have.contains(&canon) {
                return Err(CniError::generic(format!(
                    "{} in {netns} lacks address {want} (has {})",
                    env.ifname,
                    have.join(", ")
                )));
            }
        }
    }
    if let Some(i) = &conf.ipam {
        ipam::exec(&env.cni_path, &i.kind, "CHECK", stdin)?;
    }
    Ok(())
}
