//! OVN's ND responder (issue 30), as OpenFlow: a neighbor solicitation for
//! the router's address, matched by `nd_target` and the sender's
//! `nd_sll`, is turned around in place into an advertisement from the
//! router's MAC (`move` of the Ethernet and IPv6 addresses, `set_field` on
//! `eth_src`, `ipv6_src`, `nd_sll`, `icmpv6_type`, `nd_target`, out of
//! `IN_PORT`). The same rules go into nicflow (the defaults: TC ports and
//! engine; the flow stays in userspace with `field:nd_target`) and into
//! OVS 3.1's userspace datapath on identical labs; a client sends the same
//! solicitation through an AF_PACKET socket and must get the same
//! advertisement, byte for byte, with a valid ICMPv6 checksum. A
//! solicitation for another address, and one whose SLL is not the
//! client's, get nothing in both.
//!
//! Root, Open vSwitch (`ovs-vswitchd`) and python3 needed; skipped with the
//! reason otherwise. Labs are the bench testbed's (`ovnnd` prefix), torn
//! down even when an assertion fails.

#[path = "../../nicflow/tests/common/skip.rs"]
#[allow(dead_code)]
mod common;

use nicflow_bench::forward::Engine;
use nicflow_bench::testbed::{Rules, Testbed, TestbedSpec};
use std::process::Command;

const ROUTER_MAC: &str = "02:00:00:00:00:99";
const ROUTER_IP: &str = "2001:db8::99";

fn rules() -> Vec<String> {
    vec![
        "table=0,priority=1,actions=drop".into(),
        format!(
            "table=0,priority=100,icmp6,icmp_type=135,icmp_code=0,nd_target={ROUTER_IP},\
             nd_sll={{c1.mac}},actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],\
             set_field:{ROUTER_MAC}->eth_src,move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[],\
             set_field:{ROUTER_IP}->ipv6_src,set_field:{ROUTER_MAC}->nd_sll,\
             set_field:136->icmpv6_type,set_field:{ROUTER_IP}->nd_target,IN_PORT"
        ),
    ]
}

/// Send one solicitation for `target` with SLL `sll` from `iface` (source
/// `src`, Ethernet source `mac`) and print the first advertisement for
/// `target` that comes back within 2 s (hex, then `csum-ok`/`csum-bad`),
/// or `none`.
const SOLICIT: &str = r#"
import socket, struct, sys, time
iface, mac, src, target, sll = sys.argv[1:6]
mac = bytes.fromhex(mac.replace(':', ''))
sll = bytes.fromhex(sll.replace(':', ''))
src = socket.inet_pton(socket.AF_INET6, src)
tgt = socket.inet_pton(socket.AF_INET6, target)
dst = bytes.fromhex('ff0200000000000000000001ff') + tgt[13:]
def csum(src, dst, msg):
    data = src + dst + struct.pack('!I3xB', len(msg), 58) + msg
    if len(data) % 2:
        data += b'\0'
    s = sum(struct.unpack('!%dH' % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff
msg = bytes([135, 0, 0, 0, 0, 0, 0, 0]) + tgt + bytes([1, 1]) + sll
msg = msg[:2] + struct.pack('!H', csum(src, dst, msg)) + msg[4:]
ip = struct.pack('!IHBB', 0x60000000, len(msg), 58, 255) + src + dst
frame = b'\x33\x33' + dst[12:] + mac + b'\x86\xdd' + ip + msg
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x86dd))
s.bind((iface, 0))
s.settimeout(0.2)
s.send(frame)
end = time.time() + 2
while time.time() < end:
    try:
        f = s.recv(2048)
    except socket.timeout:
        continue
    if len(f) >= 78 and f[12:14] == b'\x86\xdd' and f[20] == 58 and f[54] == 136 and f[62:78] == tgt:
        plen = struct.unpack('!H', f[18:20])[0]
        m = f[54:54 + plen]
        ok = csum(f[22:38], f[38:54], m[:2] + b'\0\0' + m[4:]) == struct.unpack('!H', m[2:4])[0]
        print(f.hex())
        print('csum-ok' if ok else 'csum-bad')
        sys.exit(0)
print('none')
"#;

struct Guard(Option<Testbed>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(tb) = self.0.take() {
            let _ = tb.down();
        }
    }
}

fn solicit(ns: &str, iface: &str, mac: &str, src: &str, target: &str, sll: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-c", SOLICIT])
        .args([iface, mac, src, target, sll])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// (answer to the right solicitation, to another target, to another SLL).
fn run(engine: Engine) -> (String, String, String) {
    let spec = TestbedSpec {
        rules: Rules::Custom(rules()),
        nicflow_bin: Some(
            nicflow_bench::nicflow_bin().expect("the nicflow binary (cargo build -p nicflow)"),
        ),
        ..TestbedSpec::new(engine, 1, "ovnnd")
    };
    let tb = Testbed::up(&spec).expect("testbed up");
    let c = tb.client(0).clone();
    let _g = Guard(Some(tb));
    let src = c.ip6.to_string();
    let go = |target: &str, sll: &str| solicit(&c.netns, &c.iface, &c.mac, &src, target, sll);
    // The client's MAC differs between labs: the answer must be sent to
    // it, and is compared without it.
    let mac = c.mac.replace(':', "");
    let na = go(ROUTER_IP, &c.mac);
    let na = match na.strip_prefix(&mac) {
        Some(rest) => format!("CLIENT{rest}"),
        None => na,
    };
    (
        na,
        go("2001:db8::98", &c.mac),
        go(ROUTER_IP, "02:00:00:00:00:0b"),
    )
}

#[test]
fn nd_responder_answers_as_in_open_vswitch() {
    if !common::is_root() {
        common::skipped("ovn_nd_ovs: needs root");
        return;
    }
    for tool in ["ovs-vswitchd", "python3"] {
        if !common::have(tool) {
            common::skipped(&format!("ovn_nd_ovs: needs {tool}"));
            return;
        }
    }
    let nicflow = run(Engine::NicflowTc);
    let (na, other_target, other_sll) = &nicflow;
    let lines: Vec<&str> = na.lines().collect();
    assert_eq!(lines.len(), 2, "nicflow: no advertisement: {na}");
    assert_eq!(lines[1], "csum-ok", "{na}");
    let f = lines[0];
    assert!(f.starts_with("CLIENT"), "not to the client: {f}");
    // Back to frame offsets (the destination zeroed).
    let f = &format!("{}{}", "0".repeat(12), &f["CLIENT".len()..]);
    // eth dst = the client, eth src = the router, ICMPv6 type 136, the
    // IPv6 source is the target, the option carries the router's MAC.
    assert_eq!(&f[12..24], ROUTER_MAC.replace(':', ""), "{f}");
    assert_eq!(&f[108..110], "88", "type 136: {f}");
    assert_eq!(&f[44..76], "20010db8000000000000000000000099", "{f}");
    assert_eq!(&f[156..160], "0101", "SLL option: {f}");
    assert_eq!(&f[160..172], ROUTER_MAC.replace(':', ""), "{f}");
    assert_eq!(other_target, "none");
    assert_eq!(other_sll, "none");
    let ovs = run(Engine::Ovs);
    assert_eq!(nicflow, ovs, "the same advertisement as OVS");
}
