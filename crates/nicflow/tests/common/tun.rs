//! Tunnel pieces of the kernel datapath tests (XDP and TC): the tunnel
//! ports' configuration, what the userspace tunnel port and executor make
//! of a frame, and tunnel packets as a remote sends them.

use super::dp::v4;
use nicflow::datapath::execute::{execute, TxBatch};
use nicflow::datapath::DpAction;
use nicflow_flow::{extract, FlowKey};
use nicflow_packet::buf::PacketBuf;
use std::collections::VecDeque;

pub const UL_MAC: [u8; 6] = [2, 0, 0, 0, 0x0a, 1];
pub const REMOTE_MAC: [u8; 6] = [2, 0, 0, 0, 0x0a, 2];
/// The fixed-key VXLAN port and the key=flow Geneve port.
pub const VX_PORT: u32 = 7;
pub const GN_PORT: u32 = 8;
pub const VX_VNI: u32 = 4242;

pub fn tunnel_cfg(kind: &str, remote: u32, key: &str) -> nicflow::port::tunnel::TunnelConfig {
    let opts: std::collections::BTreeMap<String, String> = [
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
/// (after the flow's actions), `tun_id` being the frame's tunnel metadata.
pub fn userspace_encap(
    cfg: &nicflow::port::tunnel::TunnelConfig,
    inner: &[u8],
    tun_id: Option<u64>,
) -> Vec<u8> {
    use nicflow::port::tunnel::TunnelKey;
    let vni = match cfg.key {
        TunnelKey::Fixed(v) => v,
        TunnelKey::Flow => tun_id.map_or(0, |t| t as u32 & 0xff_ffff),
    };
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
        csum: false,
        vni,
        geneve_options: &[],
        geneve_oam: false,
    };
    nicflow_packet::tunnel::encap(&mut b, &e).unwrap();
    b.data().to_vec()
}

/// The userspace datapath on `frame` received on `in_port` with tunnel
/// metadata `tun`: (verdict, output port, frame, tun_id after the actions).
pub fn userspace_on(
    frame: &[u8],
    in_port: u32,
    tun: Option<nicflow_packet::buf::TunnelMeta>,
    actions: &[DpAction],
    redirect: u32,
    drop: u32,
) -> (u32, u32, Vec<u8>, Option<u64>) {
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
    );
    match tx.pkts.pop() {
        Some((port, p)) => (redirect, port, p.data().to_vec(), p.tun.map(|t| t.id)),
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
        udp_src: 50000,
        udp_dst: cfg.dst_port,
        csum,
        vni,
        geneve_options: &[],
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
