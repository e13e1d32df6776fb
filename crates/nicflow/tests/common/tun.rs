//! Tunnel pieces of the kernel datapath tests (XDP and TC): the tunnel
//! ports' configuration, what the userspace tunnel port and executor make
//! of a frame, and tunnel packets as a remote sends them.

use super::dp::{mask, v4, v6, A, B};
use nicflow::datapath::execute::{execute, TxBatch};
use nicflow::datapath::DpAction;
use nicflow_flow::{extract, FlowKey};
use nicflow_packet::buf::PacketBuf;
use nicflow_packet::builder::FrameBuilder;
use nicflow_packet::tcp::{FLAG_ACK, FLAG_PSH};
use std::collections::VecDeque;

pub const UL_MAC: [u8; 6] = [2, 0, 0, 0, 0x0a, 1];
pub const REMOTE_MAC: [u8; 6] = [2, 0, 0, 0, 0x0a, 2];
/// The fixed-key VXLAN port and the key=flow Geneve port.
pub const VX_PORT: u32 = 7;
pub const GN_PORT: u32 = 8;
pub const VX_VNI: u32 = 4242;

pub fn tunnel_cfg(kind: &str, remote: u32, key: &str) -> nicflow::port::tunnel::TunnelConfig {
    let opts: nicflow::control::proto::PortOptions = [
        ("underlay", "ul".to_string()),
        ("local_ip", v4(0x1401).to_string()),
        ("remote_ip", v4(remote).to_string()),
        ("key", key.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let kind = match kind {
        "vxlan" => nicflow_packet::tunnel::TunnelKind::Vxlan,
        _ => nicflow_packet::tunnel::TunnelKind::Geneve,
    };
    nicflow::port::tunnel::TunnelConfig::from_options(kind, &opts).unwrap()
}

/// What a tunnel port's `send_batch` puts on the underlay for `inner`
/// (after the flow's actions), `tun` being the frame's tunnel metadata:
/// the VNI, the Geneve options its TLV map sends (built by the port's own
/// `geneve_options`) and the outer UDP checksum when `cfg.csum`.
pub fn userspace_encap(
    cfg: &nicflow::port::tunnel::TunnelConfig,
    inner: &[u8],
    tun: Option<nicflow_packet::buf::TunnelMeta>,
) -> Vec<u8> {
    userspace_encap_csum(cfg, inner, tun, cfg.csum)
}

/// [`userspace_encap`] with the outer checksum on or off.
pub fn userspace_encap_csum(
    cfg: &nicflow::port::tunnel::TunnelConfig,
    inner: &[u8],
    tun: Option<nicflow_packet::buf::TunnelMeta>,
    csum: bool,
) -> Vec<u8> {
    use nicflow::port::tunnel::TunnelKey;
    let vni = match cfg.key {
        TunnelKey::Fixed(v) => v,
        TunnelKey::Flow => tun.map_or(0, |t| t.id as u32 & 0xff_ffff),
    };
    let mut opts = [0u8; nicflow::port::tunnel::GENEVE_OPTIONS_MAX];
    let n = tun.map_or(0, |t| {
        nicflow::port::tunnel::geneve_options(&cfg.tlv_map, t.md_present, &t.metadata, &mut opts)
    });
    let mut b = PacketBuf::from_slice(inner);
    let e = nicflow_packet::tunnel::Encap {
        kind: cfg.kind,
        eth_src: UL_MAC,
        eth_dst: REMOTE_MAC,
        ip_src: cfg.local_ip.into(),
        ip_dst: cfg.remote_ip.into(),
        tos: cfg.tos,
        ttl: cfg.ttl,
        df: cfg.df,
        udp_src: nicflow_packet::tunnel::entropy_port(inner),
        udp_dst: cfg.dst_port,
        csum,
        vni,
        geneve_options: &opts[..n],
        geneve_oam: false,
    };
    nicflow_packet::tunnel::encap(&mut b, &e).unwrap();
    b.data().to_vec()
}

/// The userspace datapath on `frame` received on `in_port` with tunnel
/// metadata `tun`: (verdict, output port, frame, tunnel metadata after the
/// actions).
pub fn userspace_on(
    frame: &[u8],
    in_port: u32,
    tun: Option<nicflow_packet::buf::TunnelMeta>,
    actions: &[DpAction],
    redirect: u32,
    drop: u32,
) -> (u32, u32, Vec<u8>, Option<nicflow_packet::buf::TunnelMeta>) {
    let mut key = FlowKey::default();
    let mut layout = extract(frame, in_port, &mut key).expect("test frame parses");
    let mut pkt = PacketBuf::from_slice(frame);
    pkt.tun = tun;
    let mut tx = TxBatch::default();
    let (mut pool, mut ctl) = (Vec::new(), VecDeque::new());
    let r = execute(
        actions,
        in_port,
        pkt,
        &mut layout,
        &mut tx,
        &mut pool,
        &mut ctl,
        16,
        &mut nicflow::datapath::meter::Meters::default(),
        &mut nicflow::datapath::select::SelectStates::default(),
        &mut nicflow::datapath::ct::CtScratch::default().stage(std::time::Instant::now()),
    );
    match tx.pkts.pop() {
        Some((port, p)) => (redirect, port, p.data().to_vec(), p.tun),
        None => (drop, 0, r.leftover.unwrap().data().to_vec(), None),
    }
}

/// A tunnel packet as the remote sends it: `inner` in `cfg`'s encapsulation
/// with VNI `vni`, outer UDP checksum when `csum`.
pub fn wire_csum(
    cfg: &nicflow::port::tunnel::TunnelConfig,
    inner: &[u8],
    vni: u32,
    csum: bool,
) -> Vec<u8> {
    from_remote(cfg, inner, vni, csum, 50000, &[])
}

/// A Geneve packet as the remote sends it with the option block `opts`
/// (outer UDP checksum when `csum`).
pub fn wire_opts(
    cfg: &nicflow::port::tunnel::TunnelConfig,
    inner: &[u8],
    vni: u32,
    csum: bool,
    opts: &[u8],
) -> Vec<u8> {
    from_remote(cfg, inner, vni, csum, 50001, opts)
}

/// `inner` encapsulated as `cfg`'s remote sends it, from UDP port `udp_src`.
fn from_remote(
    cfg: &nicflow::port::tunnel::TunnelConfig,
    inner: &[u8],
    vni: u32,
    csum: bool,
    udp_src: u16,
    opts: &[u8],
) -> Vec<u8> {
    let mut b = PacketBuf::from_slice(inner);
    let en = nicflow_packet::tunnel::Encap {
        kind: cfg.kind,
        eth_src: REMOTE_MAC,
        eth_dst: UL_MAC,
        ip_src: cfg.remote_ip.into(),
        ip_dst: cfg.local_ip.into(),
        tos: 0,
        ttl: 64,
        df: true,
        udp_src,
        udp_dst: cfg.dst_port,
        csum,
        vni,
        geneve_options: opts,
        geneve_oam: false,
    };
    nicflow_packet::tunnel::encap(&mut b, &en).unwrap();
    b.data().to_vec()
}

/// The tunnel metadata userspace attaches to a packet from `cfg`'s remote.
pub fn meta(
    cfg: &nicflow::port::tunnel::TunnelConfig,
    vni: u32,
) -> nicflow_packet::buf::TunnelMeta {
    nicflow_packet::buf::TunnelMeta {
        id: vni as u64,
        src: u32::from(cfg.remote_ip),
        dst: u32::from(cfg.local_ip),
        flags: nicflow_packet::buf::TUN_F_KEY,
        ..Default::default()
    }
}

/// The output slots both engines' tunnel tests use: port 2 in slot 0, the
/// fixed-key VXLAN port and the `key=flow` Geneve port in header slots 3, 4.
pub struct TunSlots;

impl nicflow::offload::kernel::PortSlots for TunSlots {
    fn slot(&self, port: u32) -> Option<u32> {
        (port == 2).then_some(0)
    }
    fn tunnel(&self, port: u32) -> Option<nicflow::offload::kernel::TunnelSlot> {
        use nicflow::offload::kernel::TunnelSlot;
        match port {
            VX_PORT => Some(TunnelSlot {
                slot: 3,
                flow_key: false,
                tlv: Default::default(),
            }),
            GN_PORT => Some(TunnelSlot {
                slot: 4,
                flow_key: true,
                tlv: Default::default(),
            }),
            _ => None,
        }
    }
}

/// Make `ul_if` an underlay of `e` (output slot 5) with the VXLAN port
/// (remote .2, VNI 4242) and the `key=flow` Geneve port (remote .3): their
/// endpoints and resolved headers (inner MTU 1450). Returns their configs.
pub fn set_up_tunnels(
    e: &mut nicflow::offload::kernel::XdpEngine,
    ul_if: u32,
) -> (
    nicflow::port::tunnel::TunnelConfig,
    nicflow::port::tunnel::TunnelConfig,
) {
    use nicflow::offload::kernel::layout::{
        TunRx, TunRxKey, TunTx, TUN_GENEVE, TUN_VXLAN, VNI_ANY,
    };
    e.set_tx_port(5, ul_if).unwrap();
    e.set_underlay(ul_if, 0, UL_MAC, 1500, 0).unwrap();
    let vx = tunnel_cfg("vxlan", 0x1402, &VX_VNI.to_string());
    let gn = tunnel_cfg("geneve", 0x1403, "flow");
    for (cfg, port, kind, vni) in [
        (&vx, VX_PORT, TUN_VXLAN, VX_VNI),
        (&gn, GN_PORT, TUN_GENEVE, VNI_ANY),
    ] {
        let key = TunRxKey {
            ifindex: ul_if,
            local: u32::from(cfg.local_ip),
            remote: u32::from(cfg.remote_ip),
            vni,
            dst_port: cfg.dst_port,
            pad: 0,
        };
        e.set_tunnel_rx(key, TunRx::new(port, kind, &cfg.tlv_map))
            .unwrap();
    }
    for (slot, cfg) in [(3, &vx), (4, &gn)] {
        let tx = TunTx {
            lock: 0,
            valid: 1,
            tx_slot: 5,
            inner_mtu: 1450,
            hdr: nicflow::port::tunnel::header_template(cfg, UL_MAC, REMOTE_MAC).unwrap(),
            flags: 0,
        };
        e.set_tunnel_tx(slot, tx).unwrap();
    }
    (vx, gn)
}

/// One frame of a tunnel differential test and the flow it hits.
pub struct TunCase {
    pub name: String,
    /// Frame as received, on the port (`inner` None) or the underlay.
    pub frame: Vec<u8>,
    /// For underlay frames: the inner frame, tunnel port and metadata the
    /// flow is installed for.
    pub inner: Option<(Vec<u8>, u32, nicflow_packet::buf::TunnelMeta)>,
    pub mask: nicflow_flow::FlowMask,
    pub actions: Vec<DpAction>,
}

/// The inner frames the tunnel tests send.
pub struct TunFrames {
    pub tcp4: Vec<u8>,
    pub udp6: Vec<u8>,
    pub udp6_tagged: Vec<u8>,
    pub icmp4: Vec<u8>,
}

pub fn tun_frames() -> TunFrames {
    let pay = b"nicflow kernel tunnel differential payload";
    let udp6 = |tag: bool| {
        let b = FrameBuilder::new(B, A);
        let b = if tag { b.vlan(0x0064) } else { b };
        b.ipv6(v6(1), v6(2)).udp(5000, 53).payload(pay).build()
    };
    TunFrames {
        tcp4: FrameBuilder::new(A, B)
            .ipv4(v4(0x3c01), v4(0x3c65))
            .tcp(40000, 5201, FLAG_ACK | FLAG_PSH)
            .payload(pay)
            .build(),
        udp6: udp6(false),
        udp6_tagged: udp6(true),
        icmp4: FrameBuilder::new(B, A)
            .ipv4(v4(0x3c65), v4(0x3c01))
            .icmp(0, 0)
            .echo(7, 1)
            .payload(pay)
            .build(),
    }
}

/// Flows matching IP protocol, VNI and remote of a tunnel frame.
pub fn tun_mask() -> nicflow_flow::FlowMask {
    mask(|m| {
        m.nw_proto = 0xff;
        m.tun_id = u64::MAX;
        m.tun_src = u32::MAX;
    })
}

/// VXLAN packets with an outer UDP checksum (the kernel's vxlan default),
/// inner sizes giving every 0-3 byte tail of the chunked verification;
/// TUN_F_CSUM in the key.
pub fn csum_tail_cases(vx: &nicflow::port::tunnel::TunnelConfig) -> Vec<TunCase> {
    (0..4u16)
        .map(|n| {
            let inner = FrameBuilder::new(A, B)
                .ipv4(v4(0x3c01), v4(0x3c65))
                .udp(30000 + n, 4789)
                .payload(&vec![0x5a; 1000 + usize::from(n)])
                .build();
            let mut m = meta(vx, VX_VNI);
            m.flags |= nicflow_packet::buf::TUN_F_CSUM;
            TunCase {
                name: format!("csum tail {n}"),
                frame: wire_csum(vx, &inner, VX_VNI, true),
                inner: Some((inner, VX_PORT, m)),
                mask: mask(|m| {
                    m.nw_proto = 0xff;
                    m.tp_src = 0xffff;
                    m.tun_flags = 0xffff;
                }),
                actions: vec![DpAction::Output(2)],
            }
        })
        .collect()
}

/// Underlay frames no kernel engine may finish, each with a reason of its
/// own (userspace decides and counts): unknown VNI, a wrong outer UDP
/// checksum, a critical Geneve option, a bad outer IPv4 checksum, a
/// foreign destination MAC, an outer frame over the underlay MTU.
pub fn underlay_frames_left_whole(
    vx: &nicflow::port::tunnel::TunnelConfig,
    gn: &nicflow::port::tunnel::TunnelConfig,
    f: &TunFrames,
) -> Vec<(&'static str, Vec<u8>)> {
    let wire = |cfg, inner: &[u8], vni| wire_csum(cfg, inner, vni, false);
    let l4 = 14 + 20;
    let mut csum = wire_csum(vx, &f.tcp4, VX_VNI, true);
    csum[l4 + 6] ^= 0x12;
    let mut critical = wire(gn, &f.icmp4, 77);
    critical[l4 + 8 + 1] |= 0x40;
    let mut bad_ip = wire(vx, &f.tcp4, VX_VNI);
    bad_ip[14 + 8] = 1; // TTL changed, header checksum not
    let mut not_ours = wire(vx, &f.tcp4, VX_VNI);
    not_ours[0..6].copy_from_slice(&[2, 0, 0, 0, 0x0a, 9]);
    vec![
        ("unknown VNI", wire(vx, &f.tcp4, 4243)),
        ("wrong outer UDP checksum", csum),
        ("geneve critical bit", critical),
        ("bad outer IPv4 checksum", bad_ip),
        ("outer destination MAC not the underlay's", not_ours),
        (
            "outer frame over the underlay MTU",
            wire(vx, &big_frame(), VX_VNI),
        ),
    ]
}

/// A TCP frame over the tunnels' 1450-byte inner MTU.
pub fn big_frame() -> Vec<u8> {
    FrameBuilder::new(A, B)
        .ipv4(v4(0x3c01), v4(0x3c65))
        .tcp(40000, 5201, FLAG_ACK)
        .payload(&[0u8; 1500])
        .build()
}

/// The cases both engines run: VXLAN decap of TCP, Geneve `key=flow`
/// decap of ICMP with a rewrite, encap into the fixed-key VXLAN port with
/// rewrites, encap into the `key=flow` Geneve port without `set_tunnel`.
pub fn shared_cases(
    vx: &nicflow::port::tunnel::TunnelConfig,
    gn: &nicflow::port::tunnel::TunnelConfig,
    f: &TunFrames,
) -> Vec<TunCase> {
    let wire = |cfg, inner: &[u8], vni| wire_csum(cfg, inner, vni, false);
    vec![
        TunCase {
            name: "vxlan decap, tcp, tun_id matched, to a port".into(),
            frame: wire(vx, &f.tcp4, VX_VNI),
            inner: Some((f.tcp4.clone(), VX_PORT, meta(vx, VX_VNI))),
            mask: tun_mask(),
            actions: vec![DpAction::Output(2)],
        },
        TunCase {
            name: "geneve key=flow decap, icmp, rewrite, to a port".into(),
            frame: wire(gn, &f.icmp4, 77),
            inner: Some((f.icmp4.clone(), GN_PORT, meta(gn, 77))),
            mask: tun_mask(),
            actions: vec![
                DpAction::SetEthDst([2, 0, 0, 0, 0, 0x33]),
                DpAction::Output(2),
            ],
        },
        TunCase {
            name: "encap, fixed vxlan key, tcp with rewrites".into(),
            frame: f.tcp4.clone(),
            inner: None,
            mask: mask(|m| m.nw_proto = 0xff),
            actions: vec![
                DpAction::SetIpv4Dst(v4(0x3c66).into()),
                DpAction::SetTpSrc(41000),
                DpAction::Output(VX_PORT),
            ],
        },
        TunCase {
            name: "encap, key=flow geneve without set_tunnel: VNI 0".into(),
            frame: f.icmp4.clone(),
            inner: None,
            mask: mask(|m| m.nw_proto = 0xff),
            actions: vec![DpAction::Output(GN_PORT)],
        },
    ]
}

/// Install every case's flow in `e` (`encode` is the engine's encoder),
/// then run each frame through `BPF_PROG_TEST_RUN` on `in_if` or the
/// underlay `ul_if` and compare with what the userspace tunnel port and
/// executor make of it: verdict, frame byte for byte, valid checksums, an
/// entropy source port, and the flow counted once with the inner frame's
/// bytes.
#[allow(clippy::too_many_arguments)]
pub fn check_against_userspace(
    e: &mut nicflow::offload::kernel::XdpEngine,
    cases: &[TunCase],
    encode: impl Fn(
        &FlowKey,
        &nicflow_flow::FlowMask,
        &[DpAction],
    ) -> Result<
        nicflow::offload::kernel::EncodedFlow,
        nicflow::offload::kernel::NotOffloadable,
    >,
    in_if: u32,
    ul_if: u32,
    (vx, gn): (
        &nicflow::port::tunnel::TunnelConfig,
        &nicflow::port::tunnel::TunnelConfig,
    ),
    redirect: u32,
    drop: u32,
) {
    let mut handles = Vec::new();
    for c in cases {
        let mut k = FlowKey::default();
        match &c.inner {
            Some((f, port, t)) => {
                extract(f, *port, &mut k).unwrap();
                k.tun_id = t.id;
                k.tun_src = t.src;
                k.tun_dst = t.dst;
                k.tun_flags = t.flags;
            }
            None => {
                extract(&c.frame, super::dp::IN_PORT, &mut k).unwrap();
            }
        }
        let enc = encode(&k, &c.mask, &c.actions).unwrap_or_else(|err| panic!("{}: {err}", c.name));
        handles.push(e.install(&enc).unwrap());
    }
    for (c, h) in cases.iter().zip(&handles) {
        let (on_if, (uv, uport, uframe, utun)) = match &c.inner {
            Some((f, port, t)) => (
                ul_if,
                userspace_on(f, *port, Some(*t), &c.actions, redirect, drop),
            ),
            None => (
                in_if,
                userspace_on(
                    &c.frame,
                    super::dp::IN_PORT,
                    None,
                    &c.actions,
                    redirect,
                    drop,
                ),
            ),
        };
        let want = match uport {
            VX_PORT => userspace_encap(vx, &uframe, utun),
            GN_PORT => userspace_encap(gn, &uframe, utun),
            _ => uframe,
        };
        let (verdict, out) = e.test_run(&c.frame, on_if, 0).unwrap();
        assert_eq!(verdict, uv, "{}: verdict", c.name);
        assert_eq!(out, want, "{}: output differs from userspace", c.name);
        assert!(
            nicflow_packet::builder::all_checksums_valid(&out),
            "{}: checksums",
            c.name
        );
        if matches!(uport, VX_PORT | GN_PORT) {
            // What the remote's parser makes of it.
            let d = nicflow_packet::tunnel::parse(&out, |p| match p {
                4789 => Some(nicflow_packet::tunnel::TunnelKind::Vxlan),
                6081 => Some(nicflow_packet::tunnel::TunnelKind::Geneve),
                _ => None,
            })
            .unwrap()
            .unwrap();
            assert!(d.udp_src >= 49152, "{}: entropy port", c.name);
        }
        let n = e.counters(h).unwrap();
        assert_eq!(n.packets, 1, "{}", c.name);
        // The inner frame's bytes, as userspace counts on the tunnel port.
        let bytes = c.inner.as_ref().map_or(c.frame.len(), |(f, _, _)| f.len());
        assert_eq!(n.bytes, bytes as u64, "{}: bytes", c.name);
    }
}
