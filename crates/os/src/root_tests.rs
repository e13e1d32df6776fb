//! The OS layer against the real kernel: two namespaces joined by a veth,
//! configured and inspected only through this layer. Needs root (skips
//! with a message otherwise). Every object is named `nfos<pid>...`, so
//! parallel runs do not meet, and a guard removes them even when an
//! assertion fails half way.

use super::link::VethEnd;
use super::netlink::Rtnl;
use super::*;
use std::net::IpAddr;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Deletes the test's namespaces (their veth ends go with them) and any
/// root-namespace link left with the test's prefix.
struct Cleanup {
    namespaces: Vec<String>,
    links: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = netns::del(ns);
        }
        if let Ok(mut rt) = Rtnl::open(None) {
            for l in &self.links {
                let _ = link::del(&mut rt, l);
            }
        }
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn namespaces_veths_addresses_routes_sysctls_features() {
    if !is_root() {
        eprintln!("skipping: needs root (creates network namespaces)");
        return;
    }
    let p = format!("nfos{}", std::process::id());
    let (ns1, ns2) = (format!("{p}n1"), format!("{p}n2"));
    let (a, b) = (format!("{p}a"), format!("{p}b"));
    let _cleanup = Cleanup {
        namespaces: vec![ns1.clone(), ns2.clone()],
        links: vec![a.clone(), b.clone()],
    };

    // Namespaces: created with lo up, listed, a second add refused.
    netns::add(&ns1).unwrap();
    netns::add(&ns2).unwrap();
    assert!(netns::exists(&ns1) && netns::exists(&ns2));
    let names = netns::list().unwrap();
    assert!(names.contains(&ns1) && names.contains(&ns2), "{names:?}");
    let again = netns::add(&ns1).unwrap_err();
    assert!(again.is_exists(), "{again}");
    let mut r1 = Rtnl::open(Some(&ns1)).unwrap();
    let mut r2 = Rtnl::open(Some(&ns2)).unwrap();
    assert!(link::get(&mut r1, "lo").unwrap().up);

    // A veth pair made from the root namespace, each end placed in its
    // namespace with its MTU and MAC.
    let mac_b = [0x02, 0, 0x5e, 0, 0x99, 2];
    let mut root = Rtnl::open(None).unwrap();
    let end_a = VethEnd {
        mtu: Some(1400),
        netns: Some(ns1.clone()),
        ..VethEnd::named(&a)
    };
    let end_b = VethEnd {
        mtu: Some(1400),
        mac: Some(mac_b),
        netns: Some(ns2.clone()),
        ..VethEnd::named(&b)
    };
    link::add_veth(&mut root, &end_a, &end_b).unwrap();
    assert!(
        !link::exists(&mut root, &a).unwrap(),
        "created in ns1, not here"
    );
    let la = link::get(&mut r1, &a).unwrap();
    assert_eq!(la.mtu, Some(1400));
    assert_eq!(la.kind.as_deref(), Some("veth"));
    assert!(la.link_netnsid.is_some(), "peer is in another namespace");
    assert_eq!(
        link::get(&mut r2, &b).unwrap().address.as_deref(),
        Some(&mac_b[..])
    );
    // The same pair again: the kernel's EEXIST, named.
    let dup = link::add_veth(
        &mut r1,
        &VethEnd::named(&a),
        &VethEnd::named(&format!("{p}c")),
    )
    .unwrap_err();
    assert!(dup.is_exists(), "{dup}");
    assert!(
        dup.to_string()
            .starts_with(&format!("RTM_NEWLINK veth {a} peer {p}c: File exists")),
        "{dup}"
    );

    // Sysctls and features, inside the namespace.
    sysctl::write(Some(&ns1), "net.ipv4.conf.all.rp_filter", "0").unwrap();
    assert_eq!(
        sysctl::read(Some(&ns1), "net.ipv4.conf.all.rp_filter").unwrap(),
        "0"
    );
    sysctl::write(Some(&ns1), "net.ipv4.conf.all.rp_filter", "2").unwrap();
    assert_eq!(
        sysctl::read(Some(&ns1), "net.ipv4.conf.all.rp_filter").unwrap(),
        "2"
    );
    ethtool::set(Some(&ns1), &a, ethtool::is_tx_checksum, false).unwrap();
    ethtool::set(Some(&ns1), &a, ethtool::is_gro, true).unwrap();
    let wanted = ethtool::wanted(Some(&ns1), &a).unwrap();
    let on = |n: &str| wanted.iter().find(|(f, _)| f == n).map(|(_, on)| *on);
    assert_eq!(on("tx-checksum-ip-generic"), Some(false));
    assert_eq!(on("rx-gro"), Some(true));

    // Addresses, alias, up, a route.
    addr::add(&mut r1, &a, ip("198.18.99.1"), 24, false).unwrap();
    addr::add(&mut r1, &a, ip("2001:db8:99::1"), 64, true).unwrap();
    addr::add(&mut r2, &b, ip("198.18.99.2"), 24, false).unwrap();
    let dup = addr::add(&mut r1, &a, ip("198.18.99.1"), 24, false).unwrap_err();
    assert!(dup.is_exists(), "{dup}");
    link::set_alias(&mut r1, &a, "nicflow os test").unwrap();
    link::set_up(&mut r1, &a).unwrap();
    link::set_up(&mut r2, &b).unwrap();
    assert!(link::get(&mut r1, &a).unwrap().up);
    route::add_via(&mut r1, Some((ip("198.19.99.0"), 24)), ip("198.18.99.2")).unwrap();
    route::add_via(&mut r1, None, ip("198.18.99.2")).unwrap();
    let unreachable =
        route::add_via(&mut r1, Some((ip("198.19.98.0"), 24)), ip("198.18.98.9")).unwrap_err();
    assert!(unreachable.errno().is_some(), "{unreachable}");
    route::add(&mut r2, Some((ip("198.19.97.0"), 24)), None, Some(&b)).unwrap();
    let have = addr::list(&mut r1, &a).unwrap();
    assert!(have.contains(&(ip("198.18.99.1"), 24)), "{have:?}");
    assert!(have.contains(&(ip("2001:db8:99::1"), 64)), "{have:?}");

    // A program in the namespace sees the namespace's /sys.
    let out = netns::command(Some(&ns1), &["cat", &format!("/sys/class/net/{a}/mtu")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1400");

    // Traffic, then the neighbour entry it left.
    let ping = netns::command(
        Some(&ns1),
        &["ping", "-n", "-c", "1", "-W", "2", "198.18.99.2"],
    )
    .output();
    if let Ok(ping) = ping {
        assert!(ping.status.success(), "{ping:?}");
        let mac = neigh::lookup(&mut r1, &a, ip("198.18.99.2")).unwrap();
        assert_eq!(mac.as_deref(), Some(&mac_b[..]));
        let stats = link::get(&mut r1, &a).unwrap().stats.unwrap();
        assert!(stats.tx_packets > 0 && stats.rx_packets > 0, "{stats:?}");
    }

    // A pinned neighbour entry, read back.
    let pinned = [0x02, 0, 0x5e, 0, 0x99, 9];
    neigh::replace_permanent(&mut r1, &a, ip("198.18.99.9"), pinned).unwrap();
    neigh::replace_permanent(&mut r1, &a, ip("198.18.99.9"), pinned).unwrap();
    assert_eq!(
        neigh::lookup(&mut r1, &a, ip("198.18.99.9"))
            .unwrap()
            .as_deref(),
        Some(&pinned[..])
    );

    // A Linux bridge with the veth end as its port.
    let br = format!("{p}br");
    link::add_bridge(&mut r2, &br).unwrap();
    link::set_master(&mut r2, &b, &br).unwrap();
    let br_index = link::index(&mut r2, &br).unwrap();
    assert_eq!(link::get(&mut r2, &b).unwrap().master, Some(br_index));
    assert_eq!(
        link::get(&mut r2, &br).unwrap().kind.as_deref(),
        Some("bridge")
    );

    // A VXLAN device on the veth end, enslaved to the bridge; an MTU.
    let vx = format!("{p}vx");
    link::add_vxlan(
        &mut r2,
        &link::Vxlan {
            name: vx.clone(),
            vni: 4242,
            local: ip("198.18.99.2"),
            remote: ip("198.18.99.1"),
            port: 4789,
            dev: Some(b.clone()),
        },
    )
    .unwrap();
    assert_eq!(
        link::get(&mut r2, &vx).unwrap().kind.as_deref(),
        Some("vxlan")
    );
    link::set_master(&mut r2, &vx, &br).unwrap();
    link::set_mtu(&mut r2, &vx, 1300).unwrap();
    link::set_up(&mut r2, &vx).unwrap();
    assert_eq!(link::get(&mut r2, &vx).unwrap().mtu, Some(1300));
    let dup = link::add_vxlan(
        &mut r2,
        &link::Vxlan {
            name: vx.clone(),
            vni: 4243,
            local: ip("198.18.99.2"),
            remote: ip("2001:db8::1"),
            port: 4789,
            dev: None,
        },
    )
    .unwrap_err();
    assert!(matches!(dup, OsError::Invalid { .. }), "{dup}");

    // Active features and driver statistics, as ethtool -k / -S read them.
    let active = ethtool::active(Some(&ns1), &a).unwrap();
    assert!(
        active
            .iter()
            .any(|(n, on)| n == "tx-checksum-ip-generic" && !on),
        "{active:?}"
    );
    let stats = ethtool::stats(Some(&ns1), &a).unwrap();
    assert!(stats.iter().any(|(n, _)| n == "peer_ifindex"), "{stats:?}");
    assert!(
        stats.iter().any(|(n, _)| n.ends_with("xdp_xmit_errors")),
        "{stats:?}"
    );

    // A veth with four queues each way.
    let (qa, qb) = (format!("{p}qa"), format!("{p}qb"));
    let q = |n: &str| VethEnd {
        queues: Some(4),
        ..VethEnd::named(n)
    };
    link::add_veth(&mut r1, &q(&qa), &q(&qb)).unwrap();
    let out = netns::command(Some(&ns1), &["ls", &format!("/sys/class/net/{qb}/queues")])
        .output()
        .unwrap();
    let queues = String::from_utf8_lossy(&out.stdout);
    assert!(
        queues.contains("rx-3") && queues.contains("tx-3"),
        "{queues}"
    );
    link::del(&mut r1, &qa).unwrap();

    // Who runs inside.
    let mut child = netns::command(Some(&ns2), &["sleep", "10"])
        .spawn()
        .unwrap();
    let pids = netns::pids(&ns2).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(pids.contains(&child.id()), "{pids:?}");

    // Deleting one end deletes the pair; deleting twice is "missing".
    link::del(&mut r1, &a).unwrap();
    assert!(!link::exists(&mut r2, &b).unwrap());
    assert!(link::del(&mut r1, &a).unwrap_err().is_missing());
    drop((r1, r2));
    netns::del(&ns1).unwrap();
    netns::del(&ns2).unwrap();
    assert!(!netns::exists(&ns1));
    assert!(netns::del(&ns1).unwrap_err().is_missing());
}
