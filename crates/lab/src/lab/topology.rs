//! The topology file: hosts, switches and the veth links between them.
//!
//! A topology is read once, validated completely, and only then acted on:
//! `up` never starts creating namespaces for a file it will later find
//! wrong. Validation reports every problem it finds, not just the first.
//! Besides shape (unknown nodes, duplicate names, interface names that
//! Linux would refuse) it enforces the lab's address policy: every address
//! and route lies inside the documentation/benchmarking ranges
//! 198.18.0.0/15 and 2001:db8::/32, so a lab can never claim a real
//! network's addresses. The format itself is documented in the module docs
//! of [`crate::lab`] and in `examples/lab/two-hosts.toml`.

use super::names::{self, IFNAME_MAX, MAX_LINKS};
use super::LabError;
use nicflow_api::config::PortType;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

/// Longest lab name (it appears in namespace names and state paths).
pub const LAB_NAME_MAX: usize = 24;
/// Longest host, switch, bridge or port name.
pub const NODE_NAME_MAX: usize = 32;

/// A validated topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    pub name: String,
    pub hosts: Vec<Host>,
    pub switches: Vec<SwitchSpec>,
    /// In file order; `index` is the position.
    pub links: Vec<Link>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    /// `net.*` keys, applied inside the host's namespace in file order.
    pub sysctls: Vec<(String, String)>,
    pub routes: Vec<Route>,
}

/// `ip route add <dst> via <via>` inside a host's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// `None` is the default route of `via`'s family.
    pub dst: Option<IfAddr>,
    pub via: IpAddr,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.dst {
            Some(d) => write!(f, "{d} via {}", self.via),
            None => write!(f, "default via {}", self.via),
        }
    }
}

/// Where a switch's daemon and ports live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SwitchNamespace {
    /// The root namespace (ports are the generated `nf…` veth ends there).
    Root,
    /// A namespace of its own, `nf-<lab>-<switch>`.
    Own,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchSpec {
    pub name: String,
    pub namespace: SwitchNamespace,
    pub port_type: PortType,
    /// Options given to every port of this switch (`[[bridge.port]] options`).
    pub port_options: BTreeMap<String, String>,
    /// At least one; `br0` with the default rule when the file names none.
    pub bridges: Vec<BridgeSpec>,
    /// `offload` of every bridge (`xdp` / `none`); `None`: the daemon's
    /// default (xdp where it loads).
    pub offload: Option<nicflow_api::OffloadMode>,
    /// XDP engine map sizes for every bridge (`max_flows`, `max_masks`,
    /// `max_ports`).
    pub offload_options: BTreeMap<String, String>,
    /// DPU mode (document 001's embedded mode): the daemon's control socket
    /// is an abstract socket of the switch's own namespace, so nothing in
    /// the host namespace can configure the switch; `nicflow lab exec LAB
    /// SWITCH -- nicflow --socket @nicflow-LAB-SWITCH ...` can.
    pub dpu: bool,
}

impl SwitchSpec {
    /// Will the switch's bridges run the XDP offload engine (and so
    /// redirect frames into the veths of its ports)?
    pub fn xdp_offload(&self) -> bool {
        let mode = self.offload.unwrap_or_default();
        self.port_type == PortType::Afxdp
            && matches!(
                mode,
                nicflow_api::OffloadMode::Xdp | nicflow_api::OffloadMode::Auto
            )
            || self.port_type == PortType::Auto && mode == nicflow_api::OffloadMode::Xdp
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgeSpec {
    pub name: String,
    pub flows: Vec<String>,
}

/// One veth pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub index: usize,
    pub a: Endpoint,
    pub b: Endpoint,
    pub mtu: Option<u32>,
    /// Keep the host ends' transmit offloads (checksum, TSO) at the kernel's
    /// defaults. On by default: nicflow's ports complete partial checksums
    /// and segment TSO frames themselves, and hosts in the real world do not
    /// reconfigure their NICs for a switch. `false` turns them off.
    pub offload: bool,
    /// GRO on the host end: `None` = on when the other end is a port of a
    /// switch running XDP offload. A frame the switch's XDP program
    /// redirects into the veth is only delivered if the host end runs NAPI
    /// (`veth_xdp_xmit`), which GRO turns on; without it the switch keeps
    /// the flows to that port in userspace (`port:no-xdp-xmit`).
    pub gro: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A host's interface, named and addressed as the file says.
    Host {
        host: String,
        iface: String,
        addresses: Vec<IfAddr>,
    },
    /// A port on one of a switch's bridges.
    Switch {
        switch: String,
        bridge: String,
        port: String,
    },
}

impl Endpoint {
    pub fn node(&self) -> &str {
        match self {
            Endpoint::Host { host, .. } => host,
            Endpoint::Switch { switch, .. } => switch,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Host { host, iface, .. } => write!(f, "{host}:{iface}"),
            Endpoint::Switch {
                switch,
                bridge,
                port,
            } => write!(f, "{switch}/{bridge}:{port}"),
        }
    }
}

/// An interface address or a route destination: `198.18.0.1/24`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IfAddr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl fmt::Display for IfAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The only IPv4 range a lab may use (RFC 2544 benchmarking).
pub const LAB_V4: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 0, 0), 15);
/// The only IPv6 range a lab may use (RFC 3849 documentation).
pub const LAB_V6: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32);

fn v4_bits(a: Ipv4Addr) -> u128 {
    u128::from(u32::from(a))
}

/// `(address as integer, width in bits)`.
fn bits(a: IpAddr) -> (u128, u8) {
    match a {
        IpAddr::V4(v) => (v4_bits(v), 32),
        IpAddr::V6(v) => (u128::from(v), 128),
    }
}

fn host_mask(width: u8, prefix: u8) -> u128 {
    let host_bits = u32::from(width - prefix);
    if host_bits >= 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    }
}

/// Whether `a` lies inside the lab range of its family.
pub fn in_lab_range(a: IpAddr) -> bool {
    let (v, width) = bits(a);
    let (base, plen) = match a {
        IpAddr::V4(_) => (v4_bits(LAB_V4.0), LAB_V4.1),
        IpAddr::V6(_) => (u128::from(LAB_V6.0), LAB_V6.1),
    };
    let m = !host_mask(width, plen) & host_mask(width, 0);
    v & m == base & m
}

fn lab_prefix_len(a: IpAddr) -> u8 {
    match a {
        IpAddr::V4(_) => LAB_V4.1,
        IpAddr::V6(_) => LAB_V6.1,
    }
}

fn range_text(a: IpAddr) -> &'static str {
    match a {
        IpAddr::V4(_) => "198.18.0.0/15",
        IpAddr::V6(_) => "2001:db8::/32",
    }
}

fn parse_cidr(s: &str) -> Result<IfAddr, String> {
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| format!("`{s}`: expected ADDRESS/PREFIX"))?;
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("`{s}`: `{a}` is not an IP address"))?;
    let prefix: u8 = p
        .parse()
        .map_err(|_| format!("`{s}`: bad prefix length `{p}`"))?;
    let width = bits(addr).1;
    if prefix > width {
        return Err(format!("`{s}`: prefix length {prefix} > {width}"));
    }
    Ok(IfAddr { addr, prefix })
}

/// Check that `net` (address or route destination) stays inside the lab
/// ranges: the address is in range and the prefix is no shorter than the
/// range's, so the connected route is inside it too.
fn check_in_range(net: &IfAddr, what: &str) -> Result<(), String> {
    if !in_lab_range(net.addr) || net.prefix < lab_prefix_len(net.addr) {
        return Err(format!(
            "{what} `{net}` is outside {} (a lab only uses 198.18.0.0/15 and 2001:db8::/32)",
            range_text(net.addr)
        ));
    }
    Ok(())
}

/// Parse and check an interface address.
pub fn parse_ifaddr(s: &str) -> Result<IfAddr, String> {
    let a = parse_cidr(s)?;
    check_in_range(&a, "address")?;
    let (v, width) = bits(a.addr);
    let hm = host_mask(width, a.prefix);
    let point_to_point = width - a.prefix <= 1;
    if !point_to_point && hm != 0 {
        if v & hm == 0 {
            return Err(format!("address `{s}` is the subnet's own address"));
        }
        if width == 32 && v & hm == hm {
            return Err(format!("address `{s}` is the subnet's broadcast address"));
        }
    }
    Ok(a)
}

fn parse_route(s: &str) -> Result<Route, String> {
    let words: Vec<&str> = s.split_whitespace().collect();
    let [dst, "via", via] = words[..] else {
        return Err(format!(
            "route `{s}`: expected `PREFIX via GATEWAY` or `default via GATEWAY`"
        ));
    };
    let via: IpAddr = via
        .parse()
        .map_err(|_| format!("route `{s}`: `{via}` is not an IP address"))?;
    if !in_lab_range(via) {
        return Err(format!(
            "route `{s}`: gateway {via} is outside {}",
            range_text(via)
        ));
    }
    let dst = if dst == "default" {
        None
    } else {
        let d = parse_cidr(dst).map_err(|e| format!("route {e}"))?;
        check_in_range(&d, "route destination")?;
        let (v, width) = bits(d.addr);
        if v & host_mask(width, d.prefix) != 0 {
            return Err(format!("route `{s}`: destination {d} has host bits set"));
        }
        if d.addr.is_ipv4() != via.is_ipv4() {
            return Err(format!(
                "route `{s}`: destination and gateway differ in family"
            ));
        }
        Some(d)
    };
    Ok(Route { dst, via })
}

// ---- the file as written -------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    name: String,
    #[serde(default, rename = "host")]
    hosts: Vec<RawHost>,
    #[serde(default, rename = "switch")]
    switches: Vec<RawSwitch>,
    #[serde(default, rename = "link")]
    links: Vec<RawLink>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    name: String,
    #[serde(default)]
    sysctl: toml::Table,
    #[serde(default)]
    routes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSwitch {
    name: String,
    #[serde(default)]
    namespace: Option<SwitchNamespace>,
    #[serde(default)]
    port_type: Option<String>,
    #[serde(default)]
    port_options: toml::Table,
    #[serde(default, rename = "bridge")]
    bridges: Vec<RawBridge>,
    #[serde(default)]
    offload: Option<nicflow_api::OffloadMode>,
    /// Numbers (`max_flows = 65536`) or words (`counters = "off"`).
    #[serde(default)]
    offload_options: BTreeMap<String, toml::Value>,
    #[serde(default)]
    dpu: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBridge {
    name: String,
    #[serde(default)]
    flows: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    a: String,
    b: String,
    #[serde(default)]
    addresses: Option<Vec<String>>,
    #[serde(default)]
    a_addresses: Option<Vec<String>>,
    #[serde(default)]
    b_addresses: Option<Vec<String>>,
    #[serde(default)]
    mtu: Option<u32>,
    #[serde(default = "default_offload")]
    offload: bool,
    #[serde(default)]
    gro: Option<bool>,
}

fn default_offload() -> bool {
    true
}

// ---- validation ----------------------------------------------------------

/// Lab names: 1-24 of a-z, 0-9, `_`, starting with a letter or digit.
pub fn valid_lab_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= LAB_NAME_MAX
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && s.as_bytes()[0].is_ascii_alphanumeric()
}

fn valid_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= NODE_NAME_MAX
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && s.as_bytes()[0].is_ascii_alphanumeric()
}

/// A name Linux accepts for an interface (dev_valid_name) that is also safe
/// on a command line.
pub fn valid_ifname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= IFNAME_MAX
        && s != "."
        && s != ".."
        && s != "lo"
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn valid_sysctl_key(s: &str) -> bool {
    (s.starts_with("net.") || s.starts_with("net/"))
        && s.len() > 4
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/'))
}

struct Validator {
    errors: Vec<String>,
}

impl Validator {
    fn err(&mut self, e: impl Into<String>) {
        self.errors.push(e.into());
    }
}

/// An endpoint as written: `NODE[/BRIDGE]:NAME`.
struct RawEnd<'a> {
    node: &'a str,
    bridge: Option<&'a str>,
    name: &'a str,
}

/// Turn a `toml` scalar into the text a command line wants.
fn scalar_text(v: toml::Value) -> Result<String, String> {
    match v {
        toml::Value::String(s) => Ok(s),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Boolean(b) => Ok(u8::from(b).to_string()),
        other => Err(format!(
            "must be a string, integer or boolean, not {}",
            other.type_str()
        )),
    }
}

impl Topology {
    /// Read and validate a topology file.
    pub fn load(path: &Path) -> Result<Topology, LabError> {
        let text = std::fs::read_to_string(path).map_err(|source| LabError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Topology::parse(&text).map_err(|e| match e {
            LabError::Parse { message, .. } => LabError::Parse {
                path: path.display().to_string(),
                message,
            },
            LabError::Invalid { errors, .. } => LabError::Invalid {
                path: path.display().to_string(),
                errors,
            },
            other => other,
        })
    }

    /// Parse and validate topology text.
    pub fn parse(text: &str) -> Result<Topology, LabError> {
        let raw: RawTopology = toml::from_str(text).map_err(|e| LabError::Parse {
            path: "<topology>".into(),
            message: e.to_string(),
        })?;
        let mut v = Validator { errors: Vec::new() };
        let topo = build(raw, &mut v);
        if v.errors.is_empty() {
            Ok(topo)
        } else {
            Err(LabError::Invalid {
                path: "<topology>".into(),
                errors: v.errors,
            })
        }
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }

    pub fn switch(&self, name: &str) -> Option<&SwitchSpec> {
        self.switches.iter().find(|s| s.name == name)
    }

    /// The namespace of a node: hosts and `own` switches have one; `root`
    /// switches (and unknown names) do not.
    pub fn namespace_of(&self, node: &str) -> Option<String> {
        let has_ns = self.host(node).is_some()
            || self
                .switch(node)
                .is_some_and(|s| s.namespace == SwitchNamespace::Own);
        has_ns.then(|| names::namespace(&self.name, node))
    }

    /// Every namespace `up` creates: hosts, then own-namespace switches.
    pub fn namespaces(&self) -> Vec<(String, String)> {
        self.hosts
            .iter()
            .map(|h| h.name.as_str())
            .chain(
                self.switches
                    .iter()
                    .filter(|s| s.namespace == SwitchNamespace::Own)
                    .map(|s| s.name.as_str()),
            )
            .map(|n| (n.to_string(), names::namespace(&self.name, n)))
            .collect()
    }

    /// Links attached to switch `name`, with the port and the veth end
    /// (generated name) that backs it.
    pub fn switch_ports(&self, name: &str) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for l in &self.links {
            for (end, side) in [(&l.a, names::Side::A), (&l.b, names::Side::B)] {
                if let Endpoint::Switch {
                    switch,
                    bridge,
                    port,
                } = end
                {
                    if switch == name {
                        out.push((
                            bridge.clone(),
                            port.clone(),
                            names::veth_name(&self.name, l.index, side),
                        ));
                    }
                }
            }
        }
        out
    }
}

fn build(raw: RawTopology, v: &mut Validator) -> Topology {
    if !valid_lab_name(&raw.name) {
        v.err(format!(
            "lab name `{}`: use 1-{LAB_NAME_MAX} of a-z, 0-9, `_` (no `-`: it separates the parts of namespace names)",
            raw.name
        ));
    }
    let mut node_names = HashSet::new();
    let hosts: Vec<Host> = raw
        .hosts
        .into_iter()
        .map(|h| build_host(h, &mut node_names, v))
        .collect();
    let switches: Vec<SwitchSpec> = raw
        .switches
        .into_iter()
        .map(|s| build_switch(s, &mut node_names, v))
        .collect();
    if raw.links.len() > MAX_LINKS {
        v.err(format!(
            "{} links: at most {MAX_LINKS} per lab",
            raw.links.len()
        ));
    }
    let mut seen = Seen::default();
    let links = raw
        .links
        .into_iter()
        .enumerate()
        .filter_map(|(index, l)| build_link(index, l, &hosts, &switches, &mut seen, v))
        .collect();
    let topo = Topology {
        name: raw.name,
        hosts,
        switches,
        links,
    };
    check_flows(&topo, v);
    check_routes(&topo, v);
    topo
}

fn check_node_name(kind: &str, name: &str, seen: &mut HashSet<String>, v: &mut Validator) {
    if !valid_node_name(name) {
        v.err(format!(
            "{kind} name `{name}`: use 1-{NODE_NAME_MAX} of A-Z, a-z, 0-9, `_`, `-`"
        ));
    }
    if !seen.insert(name.to_string()) {
        v.err(format!(
            "duplicate name `{name}` (hosts and switches share one set of names)"
        ));
    }
}

fn build_host(h: RawHost, node_names: &mut HashSet<String>, v: &mut Validator) -> Host {
    check_node_name("host", &h.name, node_names, v);
    let mut sysctls = Vec::new();
    for (k, val) in h.sysctl {
        if !valid_sysctl_key(&k) {
            v.err(format!(
                "host {}: sysctl `{k}`: only `net.*` keys (they are per namespace) are allowed",
                h.name
            ));
            continue;
        }
        match scalar_text(val) {
            Ok(t) if !t.is_empty() && !t.contains(['\n', '\r', '\0']) => sysctls.push((k, t)),
            Ok(t) => v.err(format!("host {}: sysctl `{k}`: bad value `{t}`", h.name)),
            Err(e) => v.err(format!("host {}: sysctl `{k}`: {e}", h.name)),
        }
    }
    let mut routes = Vec::new();
    for r in &h.routes {
        match parse_route(r) {
            Ok(r) => routes.push(r),
            Err(e) => v.err(format!("host {}: {e}", h.name)),
        }
    }
    Host {
        name: h.name,
        sysctls,
        routes,
    }
}

fn build_switch(s: RawSwitch, node_names: &mut HashSet<String>, v: &mut Validator) -> SwitchSpec {
    check_node_name("switch", &s.name, node_names, v);
    let port_type = match s.port_type.as_deref() {
        None => PortType::Auto,
        Some(t) => match PortType::parse(t) {
            Some(pt @ (PortType::Afpacket | PortType::Afxdp | PortType::Auto | PortType::Tc)) => pt,
            _ => {
                v.err(format!(
                    "switch {}: port_type `{t}`: a lab port is a veth end, so auto, tc, afpacket or afxdp",
                    s.name
                ));
                PortType::Afpacket
            }
        },
    };
    let mut port_options = BTreeMap::new();
    for (k, val) in s.port_options {
        match scalar_text(val) {
            Ok(t) => {
                port_options.insert(k, t);
            }
            Err(e) => v.err(format!("switch {}: port option `{k}`: {e}", s.name)),
        }
    }
    let mut bridges = Vec::new();
    let mut bridge_names = HashSet::new();
    for b in s.bridges {
        if !valid_node_name(&b.name) {
            v.err(format!(
                "switch {}: bridge name `{}`: use 1-{NODE_NAME_MAX} of A-Z, a-z, 0-9, `_`, `-`",
                s.name, b.name
            ));
        }
        if !bridge_names.insert(b.name.clone()) {
            v.err(format!("switch {}: duplicate bridge `{}`", s.name, b.name));
        }
        bridges.push(BridgeSpec {
            name: b.name,
            flows: b.flows.unwrap_or_else(default_flows),
        });
    }
    if bridges.is_empty() {
        bridges.push(BridgeSpec {
            name: "br0".into(),
            flows: default_flows(),
        });
    }
    let namespace = s.namespace.unwrap_or(SwitchNamespace::Own);
    if s.dpu && namespace != SwitchNamespace::Own {
        v.err(format!(
            "switch {}: dpu = true needs the switch in its own namespace (namespace = \"own\")",
            s.name
        ));
    }
    SwitchSpec {
        name: s.name,
        namespace,
        dpu: s.dpu,
        port_type,
        port_options,
        bridges,
        offload: s.offload,
        offload_options: s
            .offload_options
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    toml::Value::String(s) => s,
                    other => other.to_string(),
                };
                (k, v)
            })
            .collect(),
    }
}

fn default_flows() -> Vec<String> {
    vec![nicflow_api::config::DEFAULT_FLOW.to_string()]
}

/// What earlier links already claimed.
#[derive(Default)]
struct Seen {
    ifaces: HashSet<(String, String)>,
    ports: HashSet<(String, String)>,
    addrs: HashMap<IfAddr, String>,
}

fn build_link(
    index: usize,
    l: RawLink,
    hosts: &[Host],
    switches: &[SwitchSpec],
    seen: &mut Seen,
    v: &mut Validator,
) -> Option<Link> {
    let ctx = format!("link {} ({} -- {})", index + 1, l.a, l.b);
    let is_host = |s: &str| {
        parse_end(s).is_ok_and(|e| e.bridge.is_none() && hosts.iter().any(|h| h.name == e.node))
    };
    let host_ends = [is_host(&l.a), is_host(&l.b)];
    // Which addresses go to which end.
    let mut addr_lists: [Option<Vec<String>>; 2] = [l.a_addresses, l.b_addresses];
    if let Some(addrs) = l.addresses {
        match host_ends {
            [true, false] if addr_lists[0].is_none() => addr_lists[0] = Some(addrs),
            [false, true] if addr_lists[1].is_none() => addr_lists[1] = Some(addrs),
            [true, true] => v.err(format!(
                "{ctx}: both ends are hosts; use a_addresses and b_addresses instead of addresses"
            )),
            [false, false] => v.err(format!(
                "{ctx}: `addresses` needs a host end (switch ports have no addresses)"
            )),
            _ => v.err(format!(
                "{ctx}: give the host end's addresses once (addresses or {}_addresses)",
                if host_ends[0] { "a" } else { "b" }
            )),
        }
    }
    if let Some(mtu) = l.mtu {
        if !(68..=65535).contains(&mtu) {
            v.err(format!("{ctx}: mtu {mtu} outside 68-65535"));
        }
    }
    let [a_addrs, b_addrs] = addr_lists;
    let a = build_end(&ctx, "a", &l.a, a_addrs, l.mtu, hosts, switches, seen, v);
    let b = build_end(&ctx, "b", &l.b, b_addrs, l.mtu, hosts, switches, seen, v);
    Some(Link {
        index,
        a: a?,
        b: b?,
        mtu: l.mtu,
        offload: l.offload,
        gro: l.gro,
    })
}

#[allow(clippy::too_many_arguments)]
fn build_end(
    ctx: &str,
    which: &str,
    text: &str,
    addrs: Option<Vec<String>>,
    mtu: Option<u32>,
    hosts: &[Host],
    switches: &[SwitchSpec],
    seen: &mut Seen,
    v: &mut Validator,
) -> Option<Endpoint> {
    let end = match parse_end(text) {
        Ok(e) => e,
        Err(e) => {
            v.err(format!("{ctx}: {which}: {e}"));
            return None;
        }
    };
    let is_host = hosts.iter().any(|h| h.name == end.node);
    if is_host && end.bridge.is_none() {
        let (host, iface) = (end.node, end.name);
        if !valid_ifname(iface) {
            v.err(format!(
                "{ctx}: {which}: interface name `{iface}`: 1-{IFNAME_MAX} of A-Z, a-z, 0-9, `_`, `-`, `.`, and not `lo`"
            ));
        }
        if !seen.ifaces.insert((host.to_string(), iface.to_string())) {
            v.err(format!(
                "{ctx}: {which}: host {host} already has an interface `{iface}`"
            ));
        }
        let mut addresses = Vec::new();
        for s in addrs.unwrap_or_default() {
            match parse_ifaddr(&s) {
                Ok(a) => {
                    if let Some(prev) = seen.addrs.insert(a, format!("{host}:{iface}")) {
                        v.err(format!("{ctx}: address {a} is also on {prev}"));
                    }
                    if a.addr.is_ipv6() && mtu.is_some_and(|m| m < 1280) {
                        v.err(format!(
                            "{ctx}: IPv6 address {a} needs an MTU of at least 1280"
                        ));
                    }
                    addresses.push(a);
                }
                Err(e) => v.err(format!("{ctx}: {which}: {e}")),
            }
        }
        return Some(Endpoint::Host {
            host: host.to_string(),
            iface: iface.to_string(),
            addresses,
        });
    }
    if is_host {
        v.err(format!(
            "{ctx}: {which}: `{}` is a host; `NODE/BRIDGE:PORT` is for switches",
            end.node
        ));
        return None;
    }
    let Some(sw) = switches.iter().find(|s| s.name == end.node) else {
        v.err(format!(
            "{ctx}: {which}: unknown host or switch `{}`",
            end.node
        ));
        return None;
    };
    let (switch, port) = (end.node, end.name);
    if addrs.is_some() {
        v.err(format!(
            "{ctx}: {which}: {switch}:{port} is a switch port, which has no addresses"
        ));
    }
    let bridge = match end.bridge {
        Some(b) => {
            if !sw.bridges.iter().any(|x| x.name == b) {
                v.err(format!(
                    "{ctx}: {which}: switch {switch} has no bridge `{b}`"
                ));
            }
            b.to_string()
        }
        None if sw.bridges.len() == 1 => sw.bridges[0].name.clone(),
        None => {
            v.err(format!(
                "{ctx}: {which}: switch {switch} has several bridges; write `{switch}/BRIDGE:{port}`"
            ));
            String::new()
        }
    };
    if !(port.len() <= NODE_NAME_MAX && nicflow_ofctl::is_valid_port_name(port)) {
        v.err(format!(
            "{ctx}: {which}: `{port}` is not a valid port name (rules must be able to name it)"
        ));
    }
    if !seen.ports.insert((switch.to_string(), port.to_string())) {
        v.err(format!(
            "{ctx}: {which}: switch {switch} already has a port `{port}`"
        ));
    }
    Some(Endpoint::Switch {
        switch: switch.to_string(),
        bridge,
        port: port.to_string(),
    })
}

/// Rules may name the bridge's ports; check them now against the ports the
/// daemon will have (numbered in link order, as the daemon numbers them).
fn check_flows(topo: &Topology, v: &mut Validator) {
    for sw in &topo.switches {
        let ports = topo.switch_ports(&sw.name);
        for br in &sw.bridges {
            let map: nicflow_ofctl::NamedPorts = ports
                .iter()
                .filter(|(b, _, _)| *b == br.name)
                .enumerate()
                .map(|(i, (_, p, _))| (p.clone(), i as u32 + 1))
                .collect();
            if let Err(e) = nicflow_ofctl::parse_flows(&br.flows.join("\n"), &map) {
                v.err(format!(
                    "switch {} bridge {}: flow {}: {}",
                    sw.name, br.name, e.line, e.error
                ));
            }
        }
    }
}

/// A route's gateway must be reachable from an address of its family.
fn check_routes(topo: &Topology, v: &mut Validator) {
    for h in &topo.hosts {
        for r in &h.routes {
            let family_ok = topo.links.iter().any(|l| {
                [&l.a, &l.b].into_iter().any(|e| {
                    matches!(e, Endpoint::Host { host, addresses, .. }
                        if *host == h.name
                            && addresses.iter().any(|a| a.addr.is_ipv4() == r.via.is_ipv4()))
                })
            });
            if !family_ok {
                v.err(format!(
                    "host {}: route `{r}`: the host has no {} address to reach the gateway from",
                    h.name,
                    if r.via.is_ipv4() { "IPv4" } else { "IPv6" }
                ));
            }
        }
    }
}

fn parse_end(s: &str) -> Result<RawEnd<'_>, String> {
    let bad = || format!("`{s}`: expected HOST:IFACE or SWITCH[/BRIDGE]:PORT");
    let (node, name) = s.split_once(':').ok_or_else(bad)?;
    let (node, bridge) = match node.split_once('/') {
        Some((n, b)) => (n, Some(b)),
        None => (node, None),
    };
    if node.is_empty() || name.is_empty() || bridge.is_some_and(str::is_empty) {
        return Err(bad());
    }
    Ok(RawEnd { node, bridge, name })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_HOSTS: &str = r#"
        name = "t1"
        [[host]]
        name = "h1"
        sysctl = { "net.ipv4.conf.all.rp_filter" = 0, "net.ipv6.conf.all.forwarding" = false }
        routes = ["198.19.0.0/24 via 198.18.0.254", "default via 2001:db8::fe"]
        [[host]]
        name = "h2"
        [[switch]]
        name = "sw1"
        [[link]]
        a = "h1:eth0"
        b = "sw1:p1"
        addresses = ["198.18.0.1/24", "2001:db8::1/64"]
        [[link]]
        a = "sw1:p2"
        b = "h2:eth0"
        addresses = ["198.18.0.2/24"]
        mtu = 9000
    "#;

    fn errors(text: &str) -> Vec<String> {
        match Topology::parse(text) {
            Err(LabError::Invalid { errors, .. }) => errors,
            Err(e) => vec![e.to_string()],
            Ok(_) => Vec::new(),
        }
    }

    fn assert_rejected(text: &str, needle: &str) {
        let errs = errors(text);
        assert!(
            errs.iter().any(|e| e.contains(needle)),
            "expected an error containing `{needle}`, got {errs:?}"
        );
    }

    /// The two-host file with `from` replaced by `to`.
    fn tweak(from: &str, to: &str) -> String {
        assert!(TWO_HOSTS.contains(from), "{from}");
        TWO_HOSTS.replacen(from, to, 1)
    }

    #[test]
    fn parses_with_defaults() {
        let t = Topology::parse(TWO_HOSTS).unwrap();
        assert_eq!(t.name, "t1");
        let sw = t.switch("sw1").unwrap();
        assert_eq!(sw.namespace, SwitchNamespace::Own);
        assert_eq!(sw.port_type, PortType::Auto);
        assert_eq!(sw.bridges.len(), 1);
        assert_eq!(sw.bridges[0].name, "br0");
        assert_eq!(sw.bridges[0].flows, vec!["priority=0,actions=normal"]);
        let h1 = t.host("h1").unwrap();
        assert_eq!(
            h1.sysctls,
            vec![
                ("net.ipv4.conf.all.rp_filter".to_string(), "0".to_string()),
                ("net.ipv6.conf.all.forwarding".to_string(), "0".to_string()),
            ]
        );
        assert_eq!(h1.routes[0].to_string(), "198.19.0.0/24 via 198.18.0.254");
        assert_eq!(h1.routes[1].to_string(), "default via 2001:db8::fe");
        assert_eq!(t.links.len(), 2);
        match &t.links[1].b {
            Endpoint::Host {
                host,
                iface,
                addresses,
            } => {
                assert_eq!((host.as_str(), iface.as_str()), ("h2", "eth0"));
                assert_eq!(addresses[0].to_string(), "198.18.0.2/24");
            }
            e => panic!("{e:?}"),
        }
        assert_eq!(t.links[1].mtu, Some(9000));
        assert_eq!(
            t.namespaces(),
            vec![
                ("h1".to_string(), "nf-t1-h1".to_string()),
                ("h2".to_string(), "nf-t1-h2".to_string()),
                ("sw1".to_string(), "nf-t1-sw1".to_string()),
            ]
        );
        let ports = t.switch_ports("sw1");
        assert_eq!(ports.len(), 2);
        assert_eq!(ports[0].1, "p1");
        assert_eq!(ports[0].2, names::veth_name("t1", 0, names::Side::B));
        assert_eq!(ports[1].2, names::veth_name("t1", 1, names::Side::A));
        assert_eq!(t.namespace_of("sw1").as_deref(), Some("nf-t1-sw1"));
        assert_eq!(t.namespace_of("nope"), None);
    }

    #[test]
    fn the_shipped_examples_are_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/lab");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                Topology::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                n += 1;
            }
        }
        assert!(n >= 1, "no examples in {}", dir.display());
    }

    #[test]
    fn unknown_nodes_are_rejected() {
        assert_rejected(
            &tweak("a = \"h1:eth0\"", "a = \"h9:eth0\""),
            "unknown host or switch `h9`",
        );
        assert_rejected(
            &tweak("b = \"sw1:p1\"", "b = \"sw9:p1\""),
            "unknown host or switch `sw9`",
        );
        assert_rejected(
            &tweak("b = \"sw1:p1\"", "b = \"sw1/br7:p1\""),
            "has no bridge `br7`",
        );
        assert_rejected(
            &tweak("a = \"h1:eth0\"", "a = \"h1/br0:eth0\""),
            "is a host",
        );
        assert_rejected(
            &tweak("a = \"h1:eth0\"", "a = \"h1\""),
            "expected HOST:IFACE",
        );
    }

    #[test]
    fn duplicate_names_are_rejected() {
        assert_rejected(
            &tweak("name = \"h2\"", "name = \"h1\""),
            "duplicate name `h1`",
        );
        assert_rejected(
            &tweak("name = \"sw1\"", "name = \"h2\""),
            "duplicate name `h2`",
        );
        assert_rejected(
            &tweak("b = \"h2:eth0\"", "b = \"h1:eth0\""),
            "already has an interface `eth0`",
        );
        assert_rejected(
            &tweak("a = \"sw1:p2\"", "a = \"sw1:p1\""),
            "already has a port `p1`",
        );
        assert_rejected(
            &tweak(
                "addresses = [\"198.18.0.2/24\"]",
                "addresses = [\"198.18.0.1/24\"]",
            ),
            "address 198.18.0.1/24 is also on h1:eth0",
        );
        let two_bridges = TWO_HOSTS.replace(
            "name = \"sw1\"",
            "name = \"sw1\"\n[[switch.bridge]]\nname = \"a\"\n[[switch.bridge]]\nname = \"a\"",
        );
        assert_rejected(&two_bridges, "duplicate bridge `a`");
    }

    #[test]
    fn addresses_outside_the_lab_ranges_are_rejected() {
        for bad in [
            "10.0.0.1/24",
            "192.168.1.1/24",
            "198.20.0.1/24",
            "198.17.255.1/24",
            "198.18.0.1/8", // in range, but the subnet is not
            "2001:db9::1/64",
            "fe80::1/64",
            "2001:db8::1/16",
        ] {
            assert_rejected(
                &tweak("\"198.18.0.1/24\"", &format!("\"{bad}\"")),
                "outside",
            );
        }
        assert_rejected(
            &tweak("\"198.18.0.1/24\"", "\"198.18.0.0/24\""),
            "subnet's own address",
        );
        assert_rejected(
            &tweak("\"198.18.0.1/24\"", "\"198.18.0.255/24\""),
            "broadcast",
        );
        assert_rejected(
            &tweak("\"198.18.0.1/24\"", "\"198.18.0.1\""),
            "ADDRESS/PREFIX",
        );
        assert_rejected(
            &tweak("\"198.18.0.1/24\"", "\"198.18.0.1/33\""),
            "prefix length",
        );
        assert_rejected(
            &tweak(
                "\"198.19.0.0/24 via 198.18.0.254\"",
                "\"10.0.0.0/8 via 198.18.0.254\"",
            ),
            "outside",
        );
        assert_rejected(
            &tweak(
                "\"198.19.0.0/24 via 198.18.0.254\"",
                "\"198.19.0.0/24 via 10.0.0.1\"",
            ),
            "gateway 10.0.0.1 is outside",
        );
        assert_rejected(
            &tweak(
                "\"198.19.0.0/24 via 198.18.0.254\"",
                "\"198.19.0.1/24 via 198.18.0.254\"",
            ),
            "host bits",
        );
        // Edges of the ranges are fine.
        for good in ["198.18.0.1/15", "198.19.255.254/24", "198.18.0.1/31"] {
            let errs = errors(&tweak("\"198.18.0.1/24\"", &format!("\"{good}\"")));
            assert!(errs.is_empty(), "{good}: {errs:?}");
        }
        for good in ["2001:db8:ffff::1/48", "2001:db8::1/128", "2001:db8::1/32"] {
            let errs = errors(&tweak("\"2001:db8::1/64\"", &format!("\"{good}\"")));
            assert!(errs.is_empty(), "{good}: {errs:?}");
        }
    }

    #[test]
    fn other_mistakes_are_rejected() {
        assert_rejected(&tweak("name = \"t1\"", "name = \"t-1\""), "lab name `t-1`");
        assert_rejected(
            &tweak("name = \"t1\"", &format!("name = \"{}\"", "x".repeat(25))),
            "lab name",
        );
        assert_rejected(
            &tweak("a = \"h1:eth0\"", "a = \"h1:abcdefghijklmnop\""),
            "interface name",
        );
        assert_rejected(&tweak("a = \"h1:eth0\"", "a = \"h1:lo\""), "interface name");
        assert_rejected(
            &tweak(
                "\"net.ipv4.conf.all.rp_filter\" = 0",
                "\"kernel.panic\" = 1",
            ),
            "only `net.*` keys",
        );
        assert_rejected(&tweak("mtu = 9000", "mtu = 20"), "mtu 20");
        assert_rejected(
            &tweak("b = \"sw1:p1\"", "b = \"sw1:p1\"\nport_type = \"x\""),
            "unknown field",
        );
        assert_rejected(
            &tweak("name = \"sw1\"", "name = \"sw1\"\nport_type = \"tap\""),
            "port_type `tap`",
        );
        assert_rejected(
            &tweak("name = \"sw1\"", "name = \"sw1\"\nnamespace = \"h1\""),
            "unknown variant",
        );
        assert_rejected(
            &tweak("b = \"sw1:p1\"", "b = \"sw1:in_port\""),
            "not a valid port name",
        );
        assert_rejected(
            &tweak(
                "addresses = [\"198.18.0.2/24\"]",
                "b_addresses = [\"198.18.0.2/24\"]\na_addresses = [\"198.18.0.3/24\"]",
            ),
            "is a switch port",
        );
        // Rules are checked against the bridge's ports.
        let flows = tweak(
            "name = \"sw1\"",
            "name = \"sw1\"\n[[switch.bridge]]\nname = \"br0\"\nflows = [\"in_port=p1,actions=output:p2\", \"in_port=p9,actions=drop\"]",
        );
        assert_rejected(&flows, "switch sw1 bridge br0: flow 2");
        // Several problems are all reported.
        let many = tweak("a = \"h1:eth0\"", "a = \"h9:eth0\"").replacen(
            "\"198.18.0.2/24\"",
            "\"10.0.0.2/24\"",
            1,
        );
        assert!(errors(&many).len() >= 2, "{:?}", errors(&many));
    }

    #[test]
    fn host_to_host_and_switch_to_switch_links() {
        let t = Topology::parse(
            r#"
            name = "p2p"
            [[host]]
            name = "a"
            [[host]]
            name = "b"
            [[switch]]
            name = "s1"
            namespace = "root"
            [[switch]]
            name = "s2"
            [[link]]
            a = "a:eth0"
            b = "b:eth0"
            a_addresses = ["2001:db8:1::1/64"]
            b_addresses = ["2001:db8:1::2/64"]
            [[link]]
            a = "s1:trunk"
            b = "s2:trunk"
            "#,
        )
        .unwrap();
        assert_eq!(t.namespace_of("s1"), None);
        assert_eq!(
            t.switch_ports("s1")[0].2,
            names::veth_name("p2p", 1, names::Side::A)
        );
        assert_eq!(
            t.switch_ports("s2")[0].2,
            names::veth_name("p2p", 1, names::Side::B)
        );
        assert_rejected(
            r#"
            name = "p2p"
            [[host]]
            name = "a"
            [[host]]
            name = "b"
            [[link]]
            a = "a:eth0"
            b = "b:eth0"
            addresses = ["198.18.0.1/24"]
            "#,
            "both ends are hosts",
        );
    }
}
