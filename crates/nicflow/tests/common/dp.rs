//! The datapath-flow cases and helpers shared by the kernel engines'
//! differential tests (`xdp_offload.rs`, `tc_offload.rs`): frames with the
//! mask and actions of the flow each must hit, the userspace executor as
//! the reference, private network namespaces per test thread.

use super::must;
use nicflow::datapath::execute::{execute, ExecResult, TxBatch};
use nicflow::datapath::{DpAction, DropReason};
use nicflow_flow::{extract, FlowKey, FlowMask};
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::builder::FrameBuilder;
use nicflow_packet::tcp::{FLAG_ACK, FLAG_PSH, FLAG_SYN};
use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr};

pub const IN_PORT: u32 = 1;

/// The engine tests need root (BPF, namespaces) and `ip`; says why not.
pub fn skip(what: &str) -> bool {
    if !super::is_root() {
        super::skipped(&format!(
            "the {what} offload tests need root (BPF, namespaces)"
        ));
        return true;
    }
    if !super::have("ip") {
        super::skipped("`ip` not installed");
        return true;
    }
    false
}

/// Load an engine of `kind`; a verifier rejection panics with the path of
/// the saved log.
pub fn load(
    kind: nicflow::offload::kernel::EngineKind,
    cfg: nicflow::offload::kernel::XdpEngineConfig,
) -> nicflow::offload::kernel::XdpEngine {
    match nicflow::offload::kernel::XdpEngine::load_kind(kind, cfg) {
        Ok(e) => e,
        Err(err) => {
            if let Some(log) = err.verifier_log() {
                let path =
                    std::env::temp_dir().join(format!("nf-{}_dp.verifier.log", kind.as_str()));
                std::fs::write(&path, log).unwrap();
                panic!("{err}; verifier log saved to {}", path.display());
            }
            panic!("{err}");
        }
    }
}

/// Userspace reference: what `datapath::execute` does with `actions` on
/// `frame`, as the program's verdict would say it (`redirect` for one
/// output, `drop` otherwise) and the resulting frame.
pub fn userspace_verdict(
    frame: &[u8],
    actions: &[DpAction],
    redirect: u32,
    drop: u32,
) -> (u32, Vec<u8>) {
    let (r, mut tx) = userspace_exec(frame, actions);
    assert!(tx.pkts.len() <= 1, "offloadable flows output once");
    match tx.pkts.pop() {
        Some((_, p)) => (redirect, p.data().to_vec()),
        None => (
            drop,
            r.leftover
                .expect("a dropped frame is left over")
                .data()
                .to_vec(),
        ),
    }
}

/// Run `f` in a thread with a network namespace of its own.
pub fn in_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: unshare(2) only affects this thread's namespaces.
        let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            r,
            0,
            "unshare(CLONE_NEWNET): {}",
            std::io::Error::last_os_error()
        );
        f()
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

pub fn ifindex(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: a NUL-terminated name; if_nametoindex has no other input.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(i, 0, "no interface {name}");
    i
}

/// A veth pair `a`/`b` in the current (private) namespace, both up.
pub fn veth(a: &str, b: &str) {
    must(&["ip", "link", "add", a, "type", "veth", "peer", "name", b]);
    must(&["ip", "link", "set", a, "up"]);
    must(&["ip", "link", "set", b, "up"]);
}

pub const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

pub fn v4(n: u32) -> Ipv4Addr {
    Ipv4Addr::from(0xc612_0000 | n) // 198.18.x.y
}

pub fn v6(n: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, n)
}

/// The userspace executor's result for `frame` under `actions`, and what
/// it transmitted.
pub fn userspace_exec(frame: &[u8], actions: &[DpAction]) -> (ExecResult, TxBatch) {
    userspace_exec_metered(
        frame,
        actions,
        &mut nicflow::datapath::meter::Meters::default(),
    )
}

/// [`userspace_exec`] with the bridge's meters.
pub fn userspace_exec_metered(
    frame: &[u8],
    actions: &[DpAction],
    meters: &mut nicflow::datapath::meter::Meters,
) -> (ExecResult, TxBatch) {
    let mut key = FlowKey::default();
    let mut layout = extract(frame, IN_PORT, &mut key).expect("test frame parses");
    let mut tx = TxBatch::default();
    let r = execute(
        actions,
        IN_PORT,
        PacketBuf::from_slice(frame),
        &mut layout,
        &mut tx,
        &mut Vec::new(),
        &mut VecDeque::new(),
        16,
        meters,
        &mut nicflow::datapath::select::SelectStates::default(),
        &mut nicflow::datapath::ct::CtScratch::default().stage(std::time::Instant::now()),
    );
    (r, tx)
}

/// [`userspace_exec_metered`] with per-packet select state kept by the
/// caller across packets.
pub fn userspace_exec_select(
    frame: &[u8],
    actions: &[DpAction],
    meters: &mut nicflow::datapath::meter::Meters,
    select: &mut nicflow::datapath::select::SelectStates,
) -> (ExecResult, TxBatch) {
    let mut key = FlowKey::default();
    let mut layout = extract(frame, IN_PORT, &mut key).expect("test frame parses");
    let mut tx = TxBatch::default();
    let r = execute(
        actions,
        IN_PORT,
        PacketBuf::from_slice(frame),
        &mut layout,
        &mut tx,
        &mut Vec::new(),
        &mut VecDeque::new(),
        16,
        meters,
        select,
        &mut nicflow::datapath::ct::CtScratch::default().stage(std::time::Instant::now()),
    );
    (r, tx)
}

pub struct Case {
    pub name: &'static str,
    pub frame: Vec<u8>,
    pub mask: FlowMask,
    pub actions: Vec<DpAction>,
}

/// Mask builder: start from in_port + dl_type, add fields by closure.
pub fn mask(f: impl FnOnce(&mut FlowKey)) -> FlowMask {
    let mut m = FlowMask::catchall();
    m.0.in_port = u32::MAX;
    m.0.dl_type = 0xffff;
    f(&mut m.0);
    m
}

pub fn cases() -> Vec<Case> {
    let pay = b"nicflow xdp offload differential payload";
    let a6 = |n: u16| v6(n).octets();
    vec![
        Case {
            name: "ipv4 tcp: every L2-L4 rewrite",
            frame: FrameBuilder::new(A, B)
                .ipv4(v4(1), v4(0x0102))
                .ttl(64)
                .tos(0x10)
                .tcp(40000, 80, FLAG_SYN | FLAG_ACK)
                .payload(pay)
                .build(),
            mask: mask(|m| {
                m.nw_proto = 0xff;
                m.nw_dst = 0xffff_ff00;
                m.tp_dst = 0xffff;
                m.nw_ttl = 0xff;
            }),
            actions: vec![
                DpAction::SetEthSrc([2, 0, 0, 0, 0, 0x11]),
                DpAction::SetEthDst([2, 0, 0, 0, 0, 0x12]),
                DpAction::SetIpv4Src(0xc612_0a01),
                DpAction::SetIpv4Dst(0xc612_0b02),
                DpAction::SetTos(0x28),
                DpAction::SetTtl(63),
                DpAction::SetTpSrc(1234),
                DpAction::SetTpDst(8080),
                DpAction::Output(2),
            ],
        },
        Case {
            name: "ipv4 udp tagged: pop_vlan then rewrite",
            frame: FrameBuilder::new(A, B)
                .vlan(0x2064)
                .ipv4(v4(2), v4(0x0203))
                .udp(5000, 53)
                .payload(pay)
                .build(),
            mask: mask(|m| {
                m.vlan_tci = 0x1fff;
                m.nw_proto = 0xff;
                m.tp_dst = 0xffff;
            }),
            actions: vec![
                DpAction::PopVlan,
                DpAction::SetIpv4Dst(0xc612_0c03),
                DpAction::SetTpDst(5353),
                DpAction::Output(3),
            ],
        },
        Case {
            name: "ipv4 udp without checksum stays without",
            frame: FrameBuilder::new(A, B)
                .ipv4(v4(3), v4(0x0304))
                .udp(5001, 54)
                .no_udp_checksum()
                .payload(pay)
                .build(),
            mask: mask(|m| {
                m.nw_proto = 0xff;
                m.tp_dst = 0xffff;
            }),
            actions: vec![
                DpAction::SetIpv4Src(0xc612_0d04),
                DpAction::SetTpSrc(1),
                DpAction::Output(2),
            ],
        },
        Case {
            name: "ipv4 icmp echo: address rewrite, ICMP checksum untouched",
            frame: FrameBuilder::new(A, B)
                .ipv4(v4(4), v4(0x0405))
                .icmp(8, 0)
                .echo(7, 1)
                .payload(pay)
                .build(),
            mask: mask(|m| {
                m.nw_proto = 0xff;
                m.tp_src = 0xffff;
                m.nw_src = u32::MAX;
            }),
            actions: vec![DpAction::SetIpv4Src(0xc612_0e05), DpAction::Output(3)],
        },
        Case {
            name: "ipv4 tcp: push_vlan then L3/L4 rewrite at shifted offsets",
            frame: FrameBuilder::new(A, B)
                .ipv4(v4(5), v4(0x0506))
                .tcp(40001, 443, FLAG_ACK | FLAG_PSH)
                .payload(pay)
                .build(),
            mask: mask(|m| {
                m.nw_proto = 0xff;
                m.tp_dst = 0xffff;
                m.nw_src = u32::MAX;
                m.vlan_tci = 0xffff;
            }),
            actions: vec![
                DpAction::PushVlan {
                    tpid: 0x8100,
                    tci: 0x600a,
                },
                DpAction::SetIpv4Src(0xc612_0f06),
                DpAction::SetTpSrc(2222),
                DpAction::SetVlanTci(0x200b),
                DpAction::Output(2),
            ],
        },
        Case {
            name: "ipv4 options + udp",
            frame: FrameBuilder::new(A, B)
                .ipv4(v4(6), v4(0x0607))
                .ipv4_options(&[0x94, 0x04, 0, 0, 1, 1, 1, 0])
                .udp(5002, 55)
                .payload(pay)
                .build(),
            mask: mask(|m| {
                m.nw_proto = 0xff;
                m.nw_dst = u32::MAX;
            }),
            actions: vec![
                DpAction::SetIpv4Src(0xc612_1007),
                DpAction::SetTpDst(9),
                DpAction::Output(3),
            ],
        },
        Case {
            name: "ipv4 first fragment: L4 rewrite still patched",
            frame: FrameBuilder::new(A, B)
                .ipv4(v4(7), v4(0x0708))
                .ident(99)
                .ipv4_fragment(0, true)
                .udp(5003, 56)
                .payload(pay)
                .build(),
            mask: mask(|m| {
                m.nw_frag = 3;
                m.nw_dst = u32::MAX;
            }),
            actions: vec![
                DpAction::SetIpv4Dst(0xc612_1108),
                DpAction::SetTpDst(10),
                DpAction::Output(2),
            ],
        },
        Case {
            name: "ipv4 later fragment: no L4 header, port rewrite is a no-op",
            frame: FrameBuilder::new(A, B)
                .ipv4(v4(8), v4(0x0809))
                .ident(99)
                .ipv4_fragment(6, false)
                .raw_l4(17)
                .payload(pay)
                .build(),
            mask: mask(|m| {
                m.nw_frag = 3;
                m.nw_dst = u32::MAX;
            }),
            actions: vec![
                DpAction::SetIpv4Dst(0xc612_1209),
                DpAction::SetTpDst(11),
                DpAction::Output(2),
            ],
        },
        Case {
            name: "ipv6 tcp: addresses, tclass, hop limit, port",
            frame: FrameBuilder::new(A, B)
                .ipv6(v6(1), v6(0x0101))
                .tos(0x20)
                .flow_label(0x12345)
                .ttl(33)
                .tcp(40002, 22, FLAG_SYN)
                .payload(pay)
                .build(),
            mask: mask(|m| {
                m.nw_proto = 0xff;
                m.ipv6_dst = [0xff; 16];
                m.ipv6_label = 0xfffff;
                m.nw_ttl = 0xff;
            }),
            actions: vec![
                DpAction::SetIpv6Src(a6(0x0a01)),
                DpAction::SetIpv6Dst(a6(0x0b01)),
                DpAction::SetTos(0x48),
                DpAction::SetTtl(32),
                DpAction::SetTpDst(2022),
                DpAction::Output(3),
            ],
        },
        Case {
            name: "ipv6 udp double tagged (802.1ad + 802.1Q): set vlan, rewrite",
            frame: FrameBuilder::new(A, B)
                .vlan_tpid(0x88a8, 0x0010)
                .vlan(0x3020)
                .ipv6(v6(2), v6(0x0202))
                .udp(5004, 57)
                .payload(pay)
                .build(),
            mask: mask(|m| {
                m.vlan_tci = 0xffff;
                m.vlan_tci2 = 0x0fff;
                m.ipv6_src = [0xff; 16];
            }),
            actions: vec![
                DpAction::SetVlanTci(0xa011),
                DpAction::SetIpv6Dst(a6(0x0c02)),
                DpAction::SetTpSrc(7),
                DpAction::Output(2),
            ],
        },
        Case {
            name: "ipv6 double tagged: pop both tags",
            frame: FrameBuilder::new(A, B)
                .vlan_tpid(0x88a8, 0x0011)
                .vlan(0x0021)
                .ipv6(v6(3), v6(0x0303))
                .tcp(40003, 23, FLAG_ACK)
                .payload(pay)
                .build(),
            mask: mask(|m| {
                m.vlan_tci = 0xffff;
                m.vlan_tci2 = 0xffff;
            }),
            actions: vec![
                DpAction::PopVlan,
                DpAction::PopVlan,
                DpAction::SetIpv6Src(a6(0x0d03)),
                DpAction::Output(3),
            ],
        },
        Case {
            name: "ipv6 icmpv6 echo: ICMPv6 checksum patched, push_vlan",
            frame: FrameBuilder::new(A, B)
                .ipv6(v6(4), v6(0x0404))
                .icmpv6(128, 0)
                .echo(3, 4)
                .payload(pay)
                .build(),
            mask: mask(|m| {
                m.nw_proto = 0xff;
                m.tp_src = 0xffff;
                m.tp_dst = 0xffff;
                m.ipv6_src = [0xff; 16];
            }),
            actions: vec![
                DpAction::SetIpv6Src(a6(0x0e04)),
                DpAction::PushVlan {
                    tpid: 0x88a8,
                    tci: 0x0123,
                },
                DpAction::Output(2),
            ],
        },
        Case {
            name: "arp request: sender/target rewrite",
            frame: FrameBuilder::new(A, [0xff; 6])
                .arp(1, A, v4(9), [0; 6], v4(0x0909))
                .build(),
            mask: mask(|m| {
                m.nw_proto = 0xff;
                m.nw_dst = u32::MAX;
            }),
            actions: vec![
                DpAction::SetArpSpa(0xc612_1313),
                DpAction::SetArpTpa(0xc612_1414),
                DpAction::SetArpSha([2, 0, 0, 0, 0, 0x33]),
                DpAction::SetArpTha([2, 0, 0, 0, 0, 0x44]),
                DpAction::SetEthSrc([2, 0, 0, 0, 0, 0x33]),
                DpAction::Output(3),
            ],
        },
        Case {
            name: "policy drop (empty action list)",
            frame: FrameBuilder::new(A, B)
                .ipv4(v4(10), v4(0x0a0b))
                .tcp(40004, 25, FLAG_SYN)
                .build(),
            mask: mask(|m| {
                m.nw_proto = 0xff;
                m.nw_dst = u32::MAX;
            }),
            actions: vec![],
        },
        Case {
            name: "ttl exceeded drop after a rewrite",
            frame: FrameBuilder::new(A, B)
                .ipv4(v4(11), v4(0x0b0c))
                .ttl(1)
                .udp(5005, 58)
                .build(),
            mask: mask(|m| {
                m.nw_ttl = 0xff;
                m.nw_dst = u32::MAX;
            }),
            actions: vec![
                DpAction::SetEthDst([2, 0, 0, 0, 0, 0x55]),
                DpAction::Drop(DropReason::TtlExceeded),
            ],
        },
        Case {
            name: "rewrite without output ends as a drop",
            frame: FrameBuilder::new(A, B)
                .ipv6(v6(5), v6(0x0505))
                .udp(5006, 59)
                .build(),
            mask: mask(|m| {
                m.ipv6_dst = [0xff; 16];
            }),
            actions: vec![DpAction::SetIpv6Dst(a6(0x0f05))],
        },
    ]
}

pub fn ports() -> HashMap<u32, u32> {
    HashMap::from([(2, 0), (3, 1)])
}

/// Meters in a kernel engine against the userspace datapath's: for each
/// meter (packet/s and kbit/s, drop and `dscp_remark`, two bands, IPv4 and
/// IPv6), the same frame sent repeatedly through a `meter:N,output` flow
/// gets the same verdict and the same bytes from `run` (the engine's
/// `BPF_PROG_TEST_RUN`) as from `datapath::execute` with its own meter,
/// and the kernel meter's counters equal the userspace meter's. Rates are
/// 1 packet/s or 1 kbit/s, so the buckets' refill between runs is far
/// below one frame and the sequences are deterministic.
pub fn meter_differential(
    e: &mut nicflow::offload::kernel::XdpEngine,
    redirect: u32,
    drop: u32,
    run: impl Fn(&nicflow::offload::kernel::XdpEngine, &[u8]) -> (u32, Vec<u8>),
    encode: impl Fn(&FlowKey, &FlowMask, &[DpAction]) -> nicflow::offload::kernel::EncodedFlow,
) {
    use nicflow::datapath::meter::Meters;
    use nicflow::offload::kernel::encode::encode_meter;
    use nicflow_ofctl::meter::parse_meter;
    let udp4 = |tos: u8| {
        FrameBuilder::new(A, B)
            .ipv4(v4(1), v4(2))
            .tos(tos)
            .udp(1000, 2000)
            .payload(&[7; 58])
            .build()
    };
    let udp6 = |tos: u8| {
        FrameBuilder::new(A, B)
            .ipv6(v6(1), v6(2))
            .tos(tos)
            .udp(1000, 2000)
            .payload(&[7; 58])
            .build()
    };
    // (meter, frame, what each run must see: P passed as sent, R passed
    // remarked, D dropped)
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "meter=1,pktps,burst,bands=type=drop,rate=1,burst_size=3",
            udp4(0),
            "PPPDDD",
        ),
        (
            "meter=2,pktps,burst,bands=type=dscp_remark,rate=1,burst_size=2,prec_level=1",
            udp4(0x28), // AF11
            "PPRR",
        ),
        (
            "meter=3,pktps,burst,bands=type=dscp_remark,rate=1,burst_size=1,prec_level=2",
            udp6(0x49), // AF21, ECN 01 kept
            "PRR",
        ),
        (
            "meter=4,pktps,burst,bands=type=dscp_remark,rate=10,burst_size=2,prec_level=1,\
             type=drop,rate=20,burst_size=4",
            udp4(0x48), // AF21
            "PPRRDD",
        ),
        (
            "meter=6,pktps,burst,bands=type=dscp_remark,rate=1,burst_size=1,prec_level=1",
            udp4(0x58), // AF23: already the highest drop precedence, left alone
            "PPP",
        ),
        (
            // 2 kbit: two 100-byte frames (800 bits each), not a third.
            "meter=5,kbps,burst,bands=type=drop,rate=1,burst_size=2",
            udp4(0),
            "PPDD",
        ),
    ];
    for (text, frame, want) in cases {
        let spec = parse_meter(text).unwrap();
        let id = spec.meter_id;
        let mut meters = Meters::default();
        meters.set(spec.clone(), std::time::Instant::now());
        e.set_meter(encode_meter(&spec).unwrap(), id).unwrap();
        let mut key = FlowKey::default();
        extract(&frame, IN_PORT, &mut key).unwrap();
        let m = mask(|m| {
            m.nw_proto = 0xff;
            m.nw_tos = 0xff;
            m.ipv6_dst = [0xff; 16];
            m.nw_dst = u32::MAX;
        });
        let actions = [DpAction::Meter(id), DpAction::Output(2)];
        let h = e.install(&encode(&key, &m, &actions)).unwrap();
        let orig_tos = key.nw_tos;
        for (i, w) in want.chars().enumerate() {
            let (v, out) = run(e, &frame);
            let (r, mut tx) = userspace_exec_metered(&frame, &actions, &mut meters);
            let (uv, uout) = match tx.pkts.pop() {
                Some((_, p)) => (redirect, p.data().to_vec()),
                None => (drop, r.leftover.unwrap().data().to_vec()),
            };
            assert_eq!(v, uv, "{text}: frame {i}: verdict");
            assert_eq!(out, uout, "{text}: frame {i}: bytes differ from userspace");
            assert!(
                nicflow_packet::builder::all_checksums_valid(&out),
                "{text}: frame {i}: checksums"
            );
            let mut k = FlowKey::default();
            extract(&out, IN_PORT, &mut k).unwrap();
            let got = match (v == drop, k.nw_tos != orig_tos) {
                (true, _) => 'D',
                (false, true) => 'R',
                (false, false) => 'P',
            };
            assert_eq!(got, w, "{text}: frame {i}");
        }
        let k = e.meter_entry(id).expect("meter in the map");
        let u = meters.get(id).unwrap();
        assert_eq!(
            (k.packets_in, k.bytes_in),
            (u.packets_in, u.bytes_in),
            "{text}"
        );
        for (b, ub) in k.bands.iter().zip(&u.bands) {
            assert_eq!((b.packets, b.bytes), (ub.packets, ub.bytes), "{text}: band");
        }
        e.remove(&h).unwrap();
        e.remove_meter(id).unwrap();
        assert!(e.meter_entry(id).is_none());
    }
    let s = e.stats().unwrap();
    assert!(
        s.drop_reasons[3] >= 5,
        "meter drops counted: {:?}",
        s.drop_reasons
    );
}
