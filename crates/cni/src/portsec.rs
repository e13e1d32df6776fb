//! Anti-spoofing ("port security", as OVN's `ls_in_port_sec_l2`,
//! `ls_in_port_sec_ip` and `ls_in_port_sec_nd` stages do it) on every CNI
//! attachment: what enters the bridge from the attachment's representor
//! must carry the VF's MAC and, for IPv4, ARP and IPv6, the attachment's
//! own addresses. Without it a pod that adds a peer's address (or MAC) to
//! its interface passes that peer's policy rules and poisons neighbour
//! tables with gratuitous ARP.
//!
//! OpenFlow has no "continue with the next rule", so the check is a first
//! pass through table 0 at priorities above every other rule of the
//! attachment (and above `ovs-ofctl`'s default 32768): a frame that passes
//! sets bit 0 of `reg15` and is resubmitted to table 0, where the checks
//! no longer match (they all want the bit clear) and the bridge's and the
//! attachment's other rules decide as before. A frame that fails hits a
//! drop rule, whose `n_packets` counts it. For a pod with MAC M, IPv4
//! addresses A, IPv6 addresses B and link-local L (EUI-64 of M), behind
//! representor R, all with the attachment's cookie:
//!
//! ```text
//! 60020 in_port=R,reg15=0/1,dl_src=M,ip,nw_src=A               pass   (each A)
//! 60020 in_port=R,reg15=0/1,dl_src=M,arp,arp_sha=M,arp_spa=A   pass   (each A, and 0.0.0.0: RFC 5227 probes)
//! 60020 in_port=R,reg15=0/1,dl_src=M,ipv6,ipv6_src=L|B         pass   (unpoliced pods only)
//! 60020 in_port=R,reg15=0/1,dl_src=M,icmp6,ipv6_src=::,ipv6_dst=ff02::/16
//!                                                              pass   (DAD and MLD before an address; unpoliced only)
//! 60010 in_port=R,reg15=0/1,ip|arp|ipv6                        drop   (any other source)
//! 60005 in_port=R,reg15=0/1,dl_src=M                           pass   (other ethertypes: L2 check only)
//! 60000 in_port=R,reg15=0/1                                    drop   (any other MAC)
//! 60010 ipv6,dl_dst=M                                          drop   (policed pods only: no IPv6 in)
//! ```
//!
//! OVN also wants ICMPv6 type 131, 135 or 143 from `::`; these rules take
//! any ICMPv6 from `::` to link-scope multicast, because a rule on the ICMP
//! type in table 0 makes every datapath flow through the table match the
//! L4 ports exactly (the classifier unwildcards what it probes), one flow
//! per TCP connection. `::` claims no one's address either way.
//!
//! Without IPv4 addresses (no IPAM) there is no IPv4/ARP address check,
//! only the MAC's (OVN's port security with a MAC and no address).
//!
//! IPv6 pod policy is not built, so a policed pod gets no IPv6 at all: none
//! leaves it, unicast IPv6 to its MAC is dropped, and IPv6 is disabled on
//! its interface ([`disable_ipv6_key`]) so flooded multicast finds no stack.
//!
//! Not checked: the target and link-layer options of neighbour
//! solicitations and advertisements (OVN's `nd.target`, `nd.sll`,
//! `nd.tll`): the flow key has no ND fields. An unpoliced pod can still
//! advertise another address with its own MAC from its own link-local
//! source.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Priority of the rules that let a checked frame through.
pub const PRIO_PASS: u16 = 60020;
/// Priority of the drop for IPv4, ARP and IPv6 that no pass rule matched.
pub const PRIO_DROP_L3: u16 = 60010;
/// Priority of the pass for other ethertypes with the VF's MAC.
pub const PRIO_PASS_L2: u16 = 60005;
/// Priority of the drop for any other frame from the representor.
pub const PRIO_DROP_L2: u16 = 60000;

/// The register bit that says "checked": frames from the pod start with
/// it clear (registers are zero when a packet enters the bridge).
const UNCHECKED: &str = "reg15=0/0x1";
const MARK: &str = "load:1->NXM_NX_REG15[0],resubmit(,0)";

/// The IPv6 link-local address of `mac` (modified EUI-64, RFC 4291
/// appendix A), what the pod's kernel configures by default
/// (`addr_gen_mode` 0).
pub fn link_local(mac: [u8; 6]) -> Ipv6Addr {
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

/// `aa:bb:cc:dd:ee:ff` into bytes.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut it = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(it.next()?, 16).ok()?;
    }
    it.next().is_none().then_some(m)
}

/// What one attachment may send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSec {
    /// The VF's MAC.
    pub mac: [u8; 6],
    pub v4: Vec<Ipv4Addr>,
    /// Global (IPAM) IPv6 addresses; the link-local is added from `mac`.
    pub v6: Vec<Ipv6Addr>,
    /// A policed pod gets no IPv6 (IPv6 policy is not built).
    pub deny_v6: bool,
}

impl PortSec {
    /// The rules (module text), `cookie` on each, for representor `port`.
    pub fn flows(&self, cookie: u64, port: &str) -> Vec<String> {
        let c = format!("cookie={cookie:#x},table=0");
        let m = self.mac.map(|b| format!("{b:02x}")).join(":");
        let head = |prio: u16| format!("{c},priority={prio},in_port={port},{UNCHECKED}");
        let pass = head(PRIO_PASS);
        let mut v = Vec::new();
        if self.v4.is_empty() {
            v.push(format!("{pass},dl_src={m},ip,actions={MARK}"));
            v.push(format!("{pass},dl_src={m},arp,arp_sha={m},actions={MARK}"));
        } else {
            for a in &self.v4 {
                v.push(format!("{pass},dl_src={m},ip,nw_src={a},actions={MARK}"));
            }
            for a in self.v4.iter().copied().chain([Ipv4Addr::UNSPECIFIED]) {
                v.push(format!(
                    "{pass},dl_src={m},arp,arp_sha={m},arp_spa={a},actions={MARK}"
                ));
            }
        }
        if self.deny_v6 {
            v.push(format!(
                "{c},priority={PRIO_DROP_L3},ipv6,dl_dst={m},actions=drop"
            ));
        } else {
            let ll = link_local(self.mac);
            for a in std::iter::once(&ll).chain(self.v6.iter().filter(|a| **a != ll)) {
                v.push(format!(
                    "{pass},dl_src={m},ipv6,ipv6_src={a},actions={MARK}"
                ));
            }
            v.push(format!(
                "{pass},dl_src={m},icmp6,ipv6_src=::,ipv6_dst=ff02::/16,actions={MARK}"
            ));
        }
        let drop = head(PRIO_DROP_L3);
        for proto in ["ip", "arp", "ipv6"] {
            v.push(format!("{drop},{proto},actions=drop"));
        }
        v.push(format!("{},dl_src={m},actions={MARK}", head(PRIO_PASS_L2)));
        v.push(format!("{},actions=drop", head(PRIO_DROP_L2)));
        v
    }
}

/// The sysctl (slash form: an interface name may hold dots) that turns
/// IPv6 off on `ifname`.
pub fn disable_ipv6_key(ifname: &str) -> String {
    format!("net/ipv6/conf/{ifname}/disable_ipv6")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_is_eui64() {
        let m = parse_mac("02:cf:12:34:56:78").unwrap();
        assert_eq!(
            link_local(m).to_string(),
            "fe80::cf:12ff:fe34:5678",
            "U/L bit flipped, ff:fe in the middle"
        );
        assert_eq!(parse_mac("02:cf:12:34:56"), None);
        assert_eq!(parse_mac("02:cf:12:34:56:78:9a"), None);
        assert_eq!(parse_mac("zz:cf:12:34:56:78"), None);
    }

    /// Every rule parses as the bridge parses it, carries the cookie, and
    /// every check wants the "unchecked" bit, so the resubmitted frame
    /// meets none of them again (no loop).
    #[test]
    fn flows_parse_and_cannot_loop() {
        let ports = nicflow_ofctl::AutoPorts::default();
        for deny_v6 in [false, true] {
            let ps = PortSec {
                mac: parse_mac("02:cf:12:34:56:78").unwrap(),
                v4: vec!["198.19.50.2".parse().unwrap()],
                v6: vec!["2001:db8::2".parse().unwrap()],
                deny_v6,
            };
            let f = ps.flows(0xcf01, "br0pf0vf0");
            for l in &f {
                nicflow_ofctl::parse_flow(l, &ports).unwrap_or_else(|e| panic!("{l}: {e}"));
                assert!(l.starts_with("cookie=0xcf01,table=0,priority=6"), "{l}");
                assert!(
                    l.contains("reg15=0/0x1") || l.contains("dl_dst=") && l.ends_with("drop"),
                    "{l}"
                );
            }
            let v6_pass = f.iter().filter(|l| l.contains("ipv6_src=")).count();
            if deny_v6 {
                assert_eq!(v6_pass, 0, "{f:?}");
                assert!(f
                    .iter()
                    .any(|l| l.contains("ipv6,dl_dst=02:cf:12:34:56:78,actions=drop")));
            } else {
                assert!(f
                    .iter()
                    .any(|l| l.contains("ipv6_src=fe80::cf:12ff:fe34:5678,")));
                assert!(f.iter().any(|l| l.contains("ipv6_src=2001:db8::2,")));
                assert_eq!(v6_pass, 3, "{f:?}");
                // No L4 field in table 0: datapath flows stay per pod,
                // not per connection.
                assert!(!f.iter().any(|l| l.contains("icmpv6_type")), "{f:?}");
            }
            assert!(f
                .iter()
                .any(|l| l.contains("arp_sha=02:cf:12:34:56:78,arp_spa=198.19.50.2,")));
            assert!(f.iter().any(|l| l.contains("arp_spa=0.0.0.0,")));
        }
    }
}
