//! ADD, DEL and CHECK: a VF through the daemon's socket, addresses from
//! the IPAM plugin, configured inside the container's namespace, and the
//! pod's ingress policy and bandwidth limits as flow rules (and meters)
//! under a cookie of its own.
//!
//! Everything an attachment owns is keyed by (network `name`,
//! `CNI_CONTAINERID`, `CNI_IFNAME`): the record file, the rules' cookie
//! (and through the rules, the meters), and — through the namespace and
//! interface name — the VF. So one pod
//! can have several attachments (the Multus model: `eth0` on one network,
//! `net1` on another, each its own bridge) and ADD, CHECK and DEL of one
//! leave the others alone.

use super::bandwidth::{self, Bandwidth, Meters, Rate};
use super::error::{code, CniError, CniResult};
use super::ipam;
use super::policy::{self, Policy};
use super::portsec::{self, PortSec};
use super::steering::{self, Steering};
use super::types::{parse_cidr, Interface, IpamResult, NetConf, Route};
use nicflow_api::client as daemon;
use nicflow_api::proto::{Request, Response};
use nicflow_os::{self as os, netlink::Rtnl};
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
    /// The cookie of the rules ADD installed (anti-spoofing on every
    /// attachment; policy, bandwidth, steering); `None` in records of
    /// older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cookie: Option<u64>,
    /// The bandwidth meters ADD added (DEL also finds them in the rules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    meters: Vec<u32>,
}

/// The directory of this network's records.
fn records_dir(conf: &NetConf) -> PathBuf {
    conf.data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DATA_DIR))
        .join(&conf.name)
}

/// The record file of one attachment: `<containerid>-<ifname>.json`.
fn record_file(container_id: &str, ifname: &str) -> String {
    format!("{container_id}-{ifname}.json")
}

fn record_path(conf: &NetConf, env: &Env) -> PathBuf {
    records_dir(conf).join(record_file(&env.container_id, &env.ifname))
}

fn io_err(what: &str, p: &Path, e: std::io::Error) -> CniError {
    CniError::new(code::IO_FAILURE, format!("{what} {}: {e}", p.display()))
}

/// Create `dir` and the missing directories above it; the ones this call
/// created, deepest first, so a failed ADD can remove exactly those.
fn make_dirs(dir: &Path) -> CniResult<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut d = Some(dir);
    while let Some(p) = d {
        if p.exists() {
            break;
        }
        missing.push(p.to_path_buf());
        d = p.parent();
    }
    let mut created = Vec::new();
    for p in missing.iter().rev() {
        match std::fs::create_dir(p) {
            Ok(()) => created.push(p.clone()),
            // Another ADD of the network made it meanwhile: theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                remove_dirs(&created);
                return Err(io_err("creating", p, e));
            }
        }
    }
    created.reverse();
    Ok(created)
}

/// Remove the directories `dirs` (deepest first) that are empty; one that
/// another attachment's record has meanwhile filled stays.
fn remove_dirs(dirs: &[PathBuf]) {
    for d in dirs {
        if std::fs::remove_dir(d).is_err() {
            break;
        }
    }
}

fn write_record(path: &Path, r: &Record) -> CniResult<()> {
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_string(r).expect("record serializes");
    let mut res = std::fs::write(&tmp, &text);
    if matches!(&res, Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
        // A DEL of the network's last attachment removed the empty
        // directory between our `make_dirs` and now: make it again.
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| io_err("creating", d, e))?;
        }
        res = std::fs::write(&tmp, &text);
    }
    res.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_err("writing", &tmp, e)
    })?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_err("writing", path, e)
    })
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

/// Install `flows` on `bridge`, all or nothing (`add-flows`).
fn add_flows(conf: &NetConf, bridge: &str, flows: &[String]) -> CniResult<()> {
    let r = call(
        conf,
        &Request::AddFlows {
            bridge: bridge.to_string(),
            text: flows.join("\n"),
        },
    )?;
    if r.ok {
        Ok(())
    } else {
        Err(CniError::generic(format!(
            "nicflow add-flows {bridge} (policy, bandwidth, steering): {}",
            r.error.unwrap_or_default()
        )))
    }
}

/// Remove the rules carrying exactly `cookie`; a missing bridge is fine.
fn del_flows(conf: &NetConf, bridge: &str, cookie: u64) -> CniResult<()> {
    let r = call(
        conf,
        &Request::DelFlows {
            bridge: bridge.to_string(),
            filter: Some(policy::cookie_filter(cookie)),
        },
    )?;
    let err = r.error.unwrap_or_default();
    if r.ok || err.contains("no bridge") {
        Ok(())
    } else {
        Err(CniError::generic(format!(
            "nicflow del-flows {bridge} {}: {err}",
            policy::cookie_filter(cookie)
        )))
    }
}

/// The rules of `bridge` that carry `cookie` (`dump-flows` lines); none
/// when the bridge is gone.
fn flows_with(conf: &NetConf, bridge: &str, cookie: u64) -> CniResult<Vec<String>> {
    let r = call(
        conf,
        &Request::DumpFlows {
            bridge: bridge.to_string(),
        },
    )?;
    if !r.ok {
        let err = r.error.unwrap_or_default();
        if err.contains("no bridge") {
            return Ok(Vec::new());
        }
        return Err(CniError::generic(format!(
            "nicflow dump-flows {bridge}: {err}"
        )));
    }
    let tag = format!("cookie={cookie:#x},");
    Ok(r.text
        .lines()
        .filter(|l| l.contains(&tag))
        .map(str::to_string)
        .collect())
}

/// Add a meter with limit `rate`, trying ids from `start` on until one is
/// free (parallel ADDs may race for one: the loser moves on).
fn add_meter(conf: &NetConf, bridge: &str, rate: &Rate, start: u32) -> CniResult<u32> {
    let mut id = start;
    for _ in 0..512 {
        let r = call(
            conf,
            &Request::AddMeter {
                bridge: bridge.to_string(),
                meter: rate.meter_spec(id),
            },
        )?;
        if r.ok {
            return Ok(id);
        }
        let err = r.error.unwrap_or_default();
        if !err.contains("already exists") {
            return Err(CniError::generic(format!(
                "nicflow add-meter {bridge} {}: {err}",
                rate.meter_spec(id)
            )));
        }
        id = if id >= 60_000 { 1 } else { id + 1 };
    }
    Err(CniError::generic(format!(
        "bridge {bridge}: no free meter id near {start}"
    )))
}

/// Delete meter `id` (never without an id: `del-meters` with no selector
/// deletes every meter of the bridge); already gone is fine.
fn del_meter(conf: &NetConf, bridge: &str, id: u32) -> CniResult<()> {
    let r = call(
        conf,
        &Request::DelMeters {
            bridge: bridge.to_string(),
            filter: Some(format!("meter={id}")),
        },
    )?;
    let err = r.error.unwrap_or_default();
    if r.ok || err.contains("no bridge") {
        Ok(())
    } else {
        Err(CniError::generic(format!(
            "nicflow del-meters {bridge} meter={id}: {err}"
        )))
    }
}

/// Meters for `bw` on `bridge` (ingress, then egress); on failure the
/// ones already added are deleted.
fn add_meters(conf: &NetConf, bridge: &str, bw: &Bandwidth, cookie: u64) -> CniResult<Meters> {
    let mut m = Meters::default();
    let start = bandwidth::first_id(cookie);
    if let Some(r) = &bw.ingress {
        m.ingress = Some(add_meter(conf, bridge, r, start)?);
    }
    if let Some(r) = &bw.egress {
        match add_meter(conf, bridge, r, m.ingress.map_or(start, |i| i % 60_000 + 1)) {
            Ok(id) => m.egress = Some(id),
            Err(e) => {
                if let Some(i) = m.ingress {
                    let _ = del_meter(conf, bridge, i);
                }
                return Err(e);
            }
        }
    }
    Ok(m)
}

/// The MAC of host interface `name` (the representor, in the namespace
/// the plugin and the daemon share); empty if it cannot be read.
fn host_mac(name: &str) -> String {
    Rtnl::open(None)
        .and_then(|mut rt| os::link::get(&mut rt, name))
        .ok()
        .and_then(|l| l.address)
        .map(|a| mac_text(&a))
        .unwrap_or_default()
}

/// `aa:bb:cc:dd:ee:ff`, as the daemon and iproute2 print MACs.
fn mac_text(a: &[u8]) -> String {
    a.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// What the attachment may send: its VF's `mac` and the addresses of
/// `res` (IPAM's, or the interface's in CHECK); `policed`: no IPv6.
fn port_security(mac: &str, res: &IpamResult, policed: bool) -> CniResult<PortSec> {
    let mac = portsec::parse_mac(mac)
        .ok_or_else(|| CniError::generic(format!("the daemon gave the VF a bad MAC `{mac}`")))?;
    let mut ps = PortSec {
        mac,
        v4: Vec::new(),
        v6: Vec::new(),
        deny_v6: policed,
    };
    for ip in &res.ips {
        match parse_cidr(&ip.address)?.0 {
            std::net::IpAddr::V4(a) => ps.v4.push(a),
            std::net::IpAddr::V6(a) => ps.v6.push(a),
        }
    }
    Ok(ps)
}

/// The IPv4 addresses of an IPAM result, for policy rules; an IPv6 one
/// is refused when there is a policy (its ingress would stay open).
fn policy_addrs(res: &IpamResult) -> CniResult<Vec<std::net::Ipv4Addr>> {
    let mut v = Vec::new();
    for ip in &res.ips {
        match parse_cidr(&ip.address)?.0 {
            std::net::IpAddr::V4(a) => v.push(a),
            std::net::IpAddr::V6(_) => {
                return Err(CniError::invalid_config(format!(
                    "network config: `policy`: the pod got IPv6 address {} and IPv6 policy is not built",
                    ip.address
                )))
            }
        }
    }
    Ok(v)
}

fn sys_err(e: impl std::fmt::Display) -> CniError {
    CniError::generic(e.to_string())
}

/// Addresses and routes of `res` on `ifname` in `ns`.
fn configure(ns: &str, ifname: &str, res: &IpamResult) -> CniResult<()> {
    let mut rt = Rtnl::open(Some(ns)).map_err(sys_err)?;
    for ip in &res.ips {
        let (a, p) = parse_cidr(&ip.address)?;
        // IPv6 without duplicate address detection: the address is usable
        // at once, as the reference plugins arrange.
        os::addr::add(&mut rt, ifname, a, p, a.is_ipv6()).map_err(sys_err)?;
    }
    os::link::set_up(&mut rt, ifname).map_err(sys_err)?;
    for r in &res.routes {
        let dst = parse_cidr(&r.dst)?;
        let gw = match route_gateway(r, res) {
            Some(g) => Some(g.parse().map_err(|_| {
                CniError::new(
                    code::DECODE_FAILURE,
                    format!("route gateway `{g}` is not an address"),
                )
            })?),
            None => None,
        };
        os::route::add(&mut rt, Some(dst), gw, Some(ifname)).map_err(sys_err)?;
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
    // A bad policy or limit is a bad configuration: refused before
    // anything changes.
    let pol = Policy::from_conf(conf.policy.as_ref(), conf.runtime_config.as_ref())?;
    let bw = Bandwidth::from_conf(conf.bandwidth.as_ref(), conf.runtime_config.as_ref())?;
    let steer = Steering::from_conf(conf.steering.as_ref())?;
    let cookie = policy::cookie(&conf.name, &env.container_id, &env.ifname);
    let r = call(
        conf,
        &Request::AddVf {
            bridge: conf.bridge.clone(),
            namespace: ns.clone(),
            name: Some(env.ifname.clone()),
            mac: Some(attachment_mac(cookie)),
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
    let created = make_dirs(&records_dir(conf)).map_err(undo_vf)?;
    let undo_dirs = |e: CniError| {
        remove_dirs(&created);
        undo_vf(e)
    };
    write_record(
        &rec_path,
        &Record {
            bridge: conf.bridge.clone(),
            namespace: ns.clone(),
            ifname: env.ifname.clone(),
            representor: rep.clone(),
            cookie: Some(cookie),
            meters: Vec::new(),
        },
    )
    .map_err(undo_dirs)?;
    let undo = |e: CniError| {
        let _ = remove_record(&rec_path);
        undo_dirs(e)
    };
    // IPv6 pod policy is not built: a policed pod gets no IPv6 stack (the
    // switch also drops its IPv6 both ways, see `portsec`).
    if pol.is_some() {
        os::sysctl::write(Some(&ns), &portsec::disable_ipv6_key(&env.ifname), "1").map_err(
            |e| {
                undo(CniError::generic(format!(
                    "disabling IPv6 on {} in {ns}: {e}",
                    env.ifname
                )))
            },
        )?;
    }
    let res = match &conf.ipam {
        Some(i) => {
            let out = ipam::exec(env, &i.kind, "ADD", stdin).map_err(undo)?;
            let res = IpamResult::parse(&out).map_err(undo)?;
            // Refused before the addresses are set (IPv6 is off on a
            // policed pod's interface, so setting one would fail less
            // clearly).
            if pol.is_some() {
                if let Err(e) = policy_addrs(&res) {
                    let _ = ipam::exec(env, &i.kind, "DEL", stdin);
                    return Err(undo(e));
                }
            }
            if let Err(e) = configure(&ns, &env.ifname, &res) {
                let _ = ipam::exec(env, &i.kind, "DEL", stdin);
                return Err(undo(e));
            }
            res
        }
        None => IpamResult::default(),
    };
    {
        let mut added = Meters::default();
        let applied = (|| {
            let addrs = match &pol {
                Some(_) => policy_addrs(&res)?,
                None => Vec::new(),
            };
            if let Some(b) = &bw {
                added = add_meters(conf, &conf.bridge, b, cookie)?;
                let rec = Record {
                    bridge: conf.bridge.clone(),
                    namespace: ns.clone(),
                    ifname: env.ifname.clone(),
                    representor: rep.clone(),
                    cookie: Some(cookie),
                    meters: added.ingress.into_iter().chain(added.egress).collect(),
                };
                write_record(&rec_path, &rec)?;
            }
            let fwd = forward_action(&steer);
            // Anti-spoofing first: every attachment has it.
            let mut flows = port_security(&mac, &res, pol.is_some())?.flows(cookie, &rep);
            if let Some(p) = &pol {
                flows.extend(p.flows(cookie, &rep, &addrs, &added, &fwd));
            }
            flows.extend(bandwidth::flows(cookie, &rep, &mac, &added, &fwd));
            if let Some(s) = &steer {
                // The network's rules first (the same on every ADD), then
                // the pod's, in one all-or-nothing batch.
                let mut all = s.network_flows(steering::network_cookie(&conf.name));
                all.append(&mut flows);
                all.extend(s.pod_flows(cookie, &rep));
                flows = all;
            }
            add_flows(conf, &conf.bridge, &flows)
        })();
        if let Err(e) = applied {
            let _ = del_flows(conf, &conf.bridge, cookie);
            for id in added.ingress.into_iter().chain(added.egress) {
                let _ = del_meter(conf, &conf.bridge, id);
            }
            if let Some(i) = &conf.ipam {
                let _ = ipam::exec(env, &i.kind, "DEL", stdin);
            }
            return Err(undo(e));
        }
    }
    let ifaces = [
        Interface {
            name: env.ifname.clone(),
            mac,
            sandbox: netns.to_string(),
        },
        Interface {
            mac: host_mac(&rep),
            name: rep,
            sandbox: String::new(),
        },
    ];
    Ok(super::types::result_json(
        &conf.cni_version,
        &ifaces,
        0,
        &res,
        conf.prev_result.as_ref(),
    ))
}

/// Idempotent: IPAM DEL, then the attachment's rules and meters, then the
/// VF if it is still there, then the record. Missing namespace, VF,
/// bridge, rules, meters or record are fine.
pub fn del(conf: &NetConf, env: &Env, stdin: &[u8]) -> CniResult<()> {
    let rec_path = record_path(conf, env);
    let rec = read_record(&rec_path);
    if let Some(i) = &conf.ipam {
        ipam::exec(env, &i.kind, "DEL", stdin)?;
    }
    let ns = rec
        .as_ref()
        .map(|r| r.namespace.clone())
        .or_else(|| env.netns.as_deref().and_then(netns_name_lenient));
    let bridge = rec
        .as_ref()
        .map_or(conf.bridge.as_str(), |r| r.bridge.as_str());
    // The cookie is derived from the attachment, so its rules go even
    // without a record, and a policy or limit given only at ADD
    // (runtimeConfig); the meters are those its rules name and the record
    // lists.
    let cookie = policy::cookie(&conf.name, &env.container_id, &env.ifname);
    let mut meters = bandwidth::meters_in(&flows_with(conf, bridge, cookie)?);
    meters.extend(rec.as_ref().map_or(&[][..], |r| &r.meters[..]));
    meters.sort_unstable();
    meters.dedup();
    del_flows(conf, bridge, cookie)?;
    for id in meters {
        del_meter(conf, bridge, id)?;
    }
    if let Some(ns) = ns {
        if let Some((rep, _)) = find_vf(conf, bridge, &ns, &env.ifname)? {
            del_vf(conf, bridge, &rep)?;
        }
    }
    remove_record(&rec_path)?;
    // The network's directory goes with its last record (an ADD racing
    // this makes it again, see `write_record`).
    let _ = std::fs::remove_dir(records_dir(conf));
    Ok(())
}

/// The interface is in the namespace with the VF's MAC, known to the
/// daemon, and carries the addresses of `prevResult`; the policy and
/// bandwidth rules and meters are in place; the IPAM plugin's CHECK
/// agrees.
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
    let iface_err =
        |e: os::OsError| CniError::generic(format!("interface {} in {netns}: {e}", env.ifname));
    let mut rt = Rtnl::open(Some(&ns)).map_err(iface_err)?;
    let link = os::link::get(&mut rt, &env.ifname).map_err(iface_err)?;
    let has_mac = link.address.as_deref().map(mac_text).unwrap_or_default();
    if has_mac != mac {
        return Err(CniError::generic(format!(
            "{} in {netns} has MAC {has_mac}, VF {rep} has {mac}",
            env.ifname
        )));
    }
    let empty = Vec::new();
    let have: Vec<String> = os::addr::list(&mut rt, &env.ifname)
        .map_err(iface_err)?
        .iter()
        .map(|(a, p)| format!("{a}/{p}"))
        .collect();
    if let Some(prev) = &conf.prev_result {
        let ours = prev["interfaces"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .position(|i| i["name"] == env.ifname.as_str() && i["sandbox"] == netns);
        // A result that does not list this interface is some other
        // attachment's (another network of the same pod).
        if ours.is_none() {
            return Err(CniError::generic(format!(
                "prevResult has no interface {} in {netns}",
                env.ifname
            )));
        }
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
    check_policy(conf, env, rep.as_str(), &mac, &have)?;
    if let Some(i) = &conf.ipam {
        ipam::exec(env, &i.kind, "CHECK", stdin)?;
    }
    Ok(())
}

/// The VF's MAC: locally administered, unicast, from the attachment's
/// cookie. The daemon's own VF MACs count per bridge (`02:e6:5d:5f:00:00`
/// for VF 0), so pods on two nodes of one pod network would share them;
/// a MAC from the network, container and interface does not collide
/// there and stays the same when a runtime retries ADD.
fn attachment_mac(cookie: u64) -> String {
    let b = cookie.to_be_bytes();
    format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[3], b[4], b[5], b[6], b[7]
    )
}

/// What the attachment's rules forward the pod's own traffic with: the
/// bridge (`normal`), or the network's steering table.
fn forward_action(steer: &Option<Steering>) -> String {
    match steer {
        Some(_) => Steering::forward_action(),
        None => "normal".to_string(),
    }
}

/// With a policy, bandwidth limits or steering in the configuration, the bridge
/// holds exactly the rules ADD made for them (`have`: the interface's
/// `ADDR/PREFIX`es), and every meter they name exists.
fn check_policy(conf: &NetConf, env: &Env, rep: &str, mac: &str, have: &[String]) -> CniResult<()> {
    let pol = Policy::from_conf(conf.policy.as_ref(), conf.runtime_config.as_ref())?;
    let bw = Bandwidth::from_conf(conf.bandwidth.as_ref(), conf.runtime_config.as_ref())?;
    let steer = Steering::from_conf(conf.steering.as_ref())?;
    let addrs: Vec<std::net::Ipv4Addr> = have
        .iter()
        .filter_map(|a| a.split('/').next()?.parse().ok())
        .collect();
    let cookie = policy::cookie(&conf.name, &env.container_id, &env.ifname);
    // The count does not depend on the meters' ids.
    let m = bw.map_or(Meters::default(), |b| Meters {
        ingress: b.ingress.map(|_| 0),
        egress: b.egress.map(|_| 0),
    });
    let fwd = forward_action(&steer);
    // Anti-spoofing for the interface's addresses but its link-local
    // (which the rules derive from the MAC).
    let ifres = IpamResult {
        ips: have
            .iter()
            .filter(|a| !a.starts_with("fe80:"))
            .map(|a| super::types::IpConfig {
                address: a.clone(),
                gateway: None,
            })
            .collect(),
        ..IpamResult::default()
    };
    let want = port_security(mac, &ifres, pol.is_some())?
        .flows(cookie, rep)
        .len()
        + pol.map_or(0, |p| p.flows(cookie, rep, &addrs, &m, &fwd).len())
        + bandwidth::flows(cookie, rep, mac, &m, &fwd).len()
        + steer.as_ref().map_or(0, |s| s.pod_flows(cookie, rep).len());
    let got = flows_with(conf, &conf.bridge, cookie)?;
    if got.len() != want {
        return Err(CniError::generic(format!(
            "bridge {} has {} policy/bandwidth rules with cookie {cookie:#x}, expected {want}",
            conf.bridge,
            got.len()
        )));
    }
    let named = bandwidth::meters_in(&got);
    let r = call(
        conf,
        &Request::DumpMeters {
            bridge: conf.bridge.clone(),
        },
    )?;
    // `dump-meters` lines start `meter=ID` then a space (OpenFlow 1.3
    // text) or a comma (the spec form in `data`).
    let known: Vec<u32> = r
        .text
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("meter=")?;
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect();
    for id in named {
        if !known.contains(&id) {
            return Err(CniError::generic(format!(
                "bridge {}: meter {id} of cookie {cookie:#x} is missing",
                conf.bridge
            )));
        }
    }
    Ok(())
}

/// STATUS (spec 1.1): ready for ADD when the daemon answers and has the
/// bridge; otherwise code 50 (not available).
pub fn status(conf: &NetConf) -> CniResult<()> {
    let unavailable = |msg: String| CniError::new(code::NOT_AVAILABLE, msg);
    let r = call(conf, &Request::Show).map_err(|e| unavailable(e.msg))?;
    let empty = Vec::new();
    let has_bridge = r
        .data
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .any(|b| b["name"] == conf.bridge.as_str());
    if r.ok && has_bridge {
        Ok(())
    } else {
        Err(unavailable(format!(
            "nicflow daemon at {} has no bridge {}",
            socket(conf).display(),
            conf.bridge
        )))
    }
}

/// GC (spec 1.1): every attachment of this network that has a record
/// and is not in `cni.dev/valid-attachments` is deleted as DEL deletes it
/// (its policy rules, IPAM address, VF, record). Without the key nothing
/// is valid (libcni's `GCNetworkList` with no arguments means "all").
/// Only recorded attachments are known: a VF whose record was removed by
/// hand is not found.
pub fn gc(conf: &NetConf, cni_path: &str, stdin: &[u8]) -> CniResult<()> {
    let valid = conf
        .valid_attachments
        .as_ref()
        .or(conf.attachments.as_ref())
        .cloned()
        .unwrap_or_default();
    let keep: std::collections::HashSet<String> = valid
        .iter()
        .map(|a| record_file(&a.container_id, &a.ifname))
        .collect();
    let dir = records_dir(conf);
    let entries = match std::fs::read_dir(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("reading", &dir, e)),
        Ok(d) => d,
    };
    let mut failed = Vec::new();
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".json") || keep.contains(&name) {
            continue;
        }
        let Some(rec) = read_record(&e.path()) else {
            continue;
        };
        let suffix = format!("-{}.json", rec.ifname);
        let Some(cid) = name.strip_suffix(&suffix) else {
            continue;
        };
        // A record edited by hand is not trusted with a path.
        if super::types::check_container_id(cid).is_err()
            || crate::check_ifname(&rec.ifname, "ifname").is_err()
        {
            continue;
        }
        let env = Env {
            container_id: cid.to_string(),
            netns: None,
            ifname: rec.ifname.clone(),
            cni_path: cni_path.to_string(),
        };
        if let Err(e) = del(conf, &env, stdin) {
            failed.push(format!("{cid}/{}: {}", rec.ifname, e.msg));
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CniError::generic(format!(
            "GC could not delete: {}",
            failed.join("; ")
        )))
    }
}
