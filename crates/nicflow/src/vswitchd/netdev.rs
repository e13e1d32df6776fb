//! What the kernel says about an interface (for the status columns
//! ovs-vswitchd writes), and the route to a tunnel's remote (its source
//! address and underlay, as OVS takes them from the routing table).
//! Control path only: read from sysfs and `ip route get`, never per packet.

use std::path::Path;

/// The columns of `Interface` that come from the kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkInfo {
    pub ifindex: i64,
    pub mac: String,
    pub mtu: i64,
    pub admin_up: bool,
    pub link_up: bool,
}

fn read(dev: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(Path::new("/sys/class/net").join(dev).join(file))
        .ok()
        .map(|s| s.trim().to_string())
}

/// `None` when the interface does not exist (in this namespace).
pub fn link_info(dev: &str) -> Option<LinkInfo> {
    if dev.is_empty() || dev.contains('/') || dev.starts_with('.') {
        return None;
    }
    let ifindex = read(dev, "ifindex")?.parse().ok()?;
    let flags = read(dev, "flags")
        .and_then(|f| i64::from_str_radix(f.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    Some(LinkInfo {
        ifindex,
        mac: read(dev, "address").unwrap_or_default(),
        mtu: read(dev, "mtu").and_then(|m| m.parse().ok()).unwrap_or(0),
        admin_up: flags & libc::IFF_UP as i64 != 0,
        // `carrier` cannot be read while the interface is down.
        link_up: read(dev, "carrier").as_deref() == Some("1"),
    })
}

/// `statistics` as ovs-vswitchd writes them (the kernel's counters).
pub fn statistics(dev: &str) -> Vec<(&'static str, i64)> {
    const KEYS: [(&str, &str); 8] = [
        ("rx_packets", "rx_packets"),
        ("rx_bytes", "rx_bytes"),
        ("rx_dropped", "rx_dropped"),
        ("rx_errors", "rx_errors"),
        ("tx_packets", "tx_packets"),
        ("tx_bytes", "tx_bytes"),
        ("tx_dropped", "tx_dropped"),
        ("tx_errors", "tx_errors"),
    ];
    KEYS.iter()
        .filter_map(|(k, f)| {
            let v = read(dev, &format!("statistics/{f}"))?.parse().ok()?;
            Some((*k, v))
        })
        .collect()
}

/// The route to `remote`: (underlay interface, source address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dev: String,
    pub src: String,
}

/// Ask the kernel (`ip -j route get REMOTE`), as OVS's route table does
/// for a tunnel without `local_ip`.
pub fn route_to(remote: &str) -> Result<Route, String> {
    if remote.parse::<std::net::IpAddr>().is_err() {
        return Err(format!("remote_ip={remote}: not an IP address"));
    }
    let out = std::process::Command::new("ip")
        .args(["-j", "route", "get", remote])
        .output()
        .map_err(|e| format!("ip route get {remote}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "no route to remote_ip {remote}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    parse_route(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| format!("no route to remote_ip {remote} with a source address"))
}

fn parse_route(json: &str) -> Option<Route> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let r = v.as_array()?.first()?;
    Some(Route {
        dev: r.get("dev")?.as_str()?.to_string(),
        src: r.get("prefsrc")?.as_str()?.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_get_output_is_read() {
        let j = r#"[{"dst":"198.18.0.2","dev":"nf-u0","prefsrc":"198.18.0.1","flags":[],"uid":0,"cache":[]}]"#;
        assert_eq!(
            parse_route(j),
            Some(Route {
                dev: "nf-u0".into(),
                src: "198.18.0.1".into()
            })
        );
        assert_eq!(parse_route("[]"), None);
        assert_eq!(parse_route("garbage"), None);
        assert!(route_to("not-an-ip").is_err());
    }

    #[test]
    fn loopback_is_read_and_a_missing_link_is_none() {
        let lo = link_info("lo").expect("lo exists");
        assert_eq!(lo.ifindex, 1);
        assert!(link_info("nf-no-such-link0").is_none());
        assert!(link_info("../etc").is_none());
    }
}
