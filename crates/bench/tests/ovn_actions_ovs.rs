//! OVN's actions (issue 30) behave in nicflow as in Open vSwitch: one
//! table using a conjunctive match (an address-set ACL of two dimensions:
//! the client's address, and TCP port 8080 only), `clone(...)` for the
//! return path, and `push:`/`pop:` (the Ethernet addresses swapped twice
//! through the stack, which must leave the frame as it was), loaded into
//! nicflow (the defaults: TC ports and engine) and into OVS 3.1's userspace
//! datapath on identical labs. Real traffic (curl, ping both ways) must get
//! the same verdicts.
//!
//! Root and Open vSwitch (`ovs-vswitchd`) needed; skipped with the reason
//! otherwise. Labs are the bench testbed's (`ovn` prefix), torn down even
//! when an assertion fails.

#[path = "../../nicflow/tests/common/skip.rs"]
#[allow(dead_code)]
mod common;

use nicflow_bench::forward::Engine;
use nicflow_bench::testbed::{Rules, Testbed, TestbedSpec};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RULES: &[&str] = &[
    "table=0,priority=1,actions=drop",
    "table=0,priority=10,arp,actions=normal",
    "table=0,priority=100,ip,in_port={c1},nw_src={c1.ip4},actions=conjunction(7,1/2)",
    "table=0,priority=100,tcp,tp_dst=8080,actions=conjunction(7,2/2)",
    "table=0,priority=100,conj_id=7,ip,actions=push:NXM_OF_ETH_SRC[],push:NXM_OF_ETH_DST[],pop:NXM_OF_ETH_SRC[],pop:NXM_OF_ETH_DST[],push:NXM_OF_ETH_SRC[],push:NXM_OF_ETH_DST[],pop:NXM_OF_ETH_SRC[],pop:NXM_OF_ETH_DST[],output:{s1}",
    "table=0,priority=100,ip,in_port={s1},actions=clone(mod_dl_dst:02:00:00:00:00:99,output:{c1}),output:{c1}",
];

struct Guard {
    tb: Option<Testbed>,
    servers: Vec<std::process::Child>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        if let Some(tb) = self.tb.take() {
            let _ = tb.down();
        }
    }
}

fn in_ns(ns: &str, args: &[&str]) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run(engine: Engine) -> Vec<bool> {
    let spec = TestbedSpec {
        rules: Rules::Custom(RULES.iter().map(|s| s.to_string()).collect()),
        nicflow_bin: Some(
            nicflow_bench::nicflow_bin().expect("the nicflow binary (cargo build -p nicflow)"),
        ),
        ..TestbedSpec::new(engine, 1, "ovn")
    };
    let tb = Testbed::up(&spec).expect("testbed up");
    let (c, s) = (tb.client(0).clone(), tb.server(0).clone());
    let server = |ns: &str, addr: &str, port: &str| {
        Command::new("ip")
            .args(["netns", "exec", ns, "python3", "-m", "http.server", port])
            .args(["--bind", addr, "--directory", "/"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 http.server")
    };
    let s4 = s.ip4.to_string();
    let c4 = c.ip4.to_string();
    let _g = Guard {
        tb: Some(tb),
        servers: vec![
            server(&s.netns, &s4, "8080"),
            server(&s.netns, &s4, "8081"),
            server(&c.netns, &c4, "8080"),
        ],
    };
    let curl = |ns: &str, url: &str| in_ns(ns, &["curl", "-s", "-o", "/dev/null", "-m", "2", url]);
    let ping = |ns: &str, to: &str| in_ns(ns, &["ping", "-c", "2", "-i", "0.2", "-W", "1", to]);
    let to_8080 = format!("http://{s4}:8080/");
    // The servers take a moment to listen.
    let t = Instant::now();
    let mut first = false;
    while t.elapsed() < Duration::from_secs(10) {
        if curl(&c.netns, &to_8080) {
            first = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    vec![
        first,
        curl(&c.netns, &to_8080),
        curl(&c.netns, &format!("http://{s4}:8081/")),
        curl(&s.netns, &format!("http://{c4}:8080/")),
        ping(&c.netns, &s4),
        ping(&s.netns, &c4),
    ]
}

#[test]
fn ovn_actions_behave_as_in_open_vswitch() {
    if !common::is_root() {
        common::skipped("ovn_actions_ovs: needs root");
        return;
    }
    for tool in ["ovs-vswitchd", "curl", "ping", "python3"] {
        if !common::have(tool) {
            common::skipped(&format!("ovn_actions_ovs: needs {tool}"));
            return;
        }
    }
    let nicflow = run(Engine::NicflowTc);
    let ovs = run(Engine::Ovs);
    assert_eq!(
        nicflow,
        vec![true, true, false, false, false, false],
        "nicflow: curl c->s:8080 x2, c->s:8081, s->c:8080, ping c->s, ping s->c"
    );
    assert_eq!(nicflow, ovs, "same verdicts as OVS");
}
