//! Published hardware figures for the modelled NICs, each with its source.
//!
//! `nicflow offload-plan` ends with a *predicted gain*: the share of
//! packets and bytes the NIC would carry, the host CPU that would be freed,
//! and the rates the hardware is known to sustain. nicflow never runs on
//! the real NICs, so those rates cannot come from nicflow: this table holds
//! the figures other people published — the five seed documents in
//! `shared/seeds/` (000-004) and vendor or academic material — so that a
//! prediction can quote them, with where they come from and what was
//! measured.
//!
//! **These are published figures, not nicflow measurements.** A figure is
//! only as good as its `conditions`: packet size, table depth, link speed,
//! host and software versions all move these numbers by large factors (seed
//! 003: the same BlueField-2 eSwitch forwards 108.9 Mpps or 55.9 Mpps
//! depending on per-entry counters and table occupancy). A vendor's
//! marketing number says so in its `conditions` ("vendor claim"); a
//! measurement on a sibling product (Agilio LX for the Agilio CX profile)
//! says so too. Nothing here may be printed as something nicflow measured.
//!
//! Metric names (value in `unit`):
//!
//! | metric | meaning |
//! | --- | --- |
//! | `line_rate_gbps` | Ethernet bandwidth of the card or of the tested port (see `conditions`) |
//! | `offloaded_gbps` | throughput measured through the hardware path |
//! | `offloaded_pps_64b` | packet rate of 64-byte frames through the hardware path |
//! | `offloaded_pps` | packet rate through the hardware path, frame size other or unstated |
//! | `offloaded_latency_us` | ping-pong latency through the hardware path |
//! | `offloaded_flows_max` | flow-table capacity published for the hardware |
//! | `flow_entries_tested` | largest flow table a measurement used (not a limit) |
//! | `ct_offload_cps` | new connections per second with conntrack offload on |
//! | `ct_offload_tps` | TCP_CRR transactions per second with conntrack offload on |
//! | `ct_connections_tested` | concurrent offloaded connections a measurement used (not a limit) |
//! | `ct_offload_added_latency_us` | latency conntrack offload adds over no conntrack |
//! | `vxlan_ipsec_gbps` | VXLAN + IPsec throughput with the crypto offloaded |
//! | `ipsec_gbps` | IPsec throughput with the crypto offloaded |
//! | `host_cpu_cores_saved` | host cores an offload freed in the cited experiment |
//! | `host_cpu_pct` | host CPU load while the NIC carried the traffic |
//! | `host_cpu_reclaimed_pct` | share of the vswitch's host CPU an offload gives back |
//! | `ovs_throughput_gain` | throughput with the offload over without it (ratio) |
//!
//! A metric ending in `_no_offload` is the software path measured in the
//! same experiment (host kernel, iptables, LVS, conntrack on the DPU's Arm
//! cores): it is there so a prediction can state a ratio under one set of
//! conditions rather than mixing experiments.

use crate::Profile;
use serde::Serialize;

/// The metric names used in [`FIGURES`] (each may also appear with the
/// suffix `_no_offload`, the software path of the same experiment).
pub const METRICS: &[&str] = &[
    "line_rate_gbps",
    "offloaded_gbps",
    "offloaded_pps_64b",
    "offloaded_pps",
    "offloaded_latency_us",
    "offloaded_flows_max",
    "flow_entries_tested",
    "ct_offload_cps",
    "ct_offload_tps",
    "ct_connections_tested",
    "ct_offload_added_latency_us",
    "vxlan_ipsec_gbps",
    "ipsec_gbps",
    "host_cpu_cores_saved",
    "host_cpu_pct",
    "host_cpu_reclaimed_pct",
    "ovs_throughput_gain",
];

/// Suffix of a metric measured on the software path of the same experiment.
pub const NO_OFFLOAD: &str = "_no_offload";

/// One published figure.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Figure {
    pub profile: Profile,
    /// What was measured or claimed; see the module docs for the names.
    pub metric: &'static str,
    pub value: f64,
    pub unit: &'static str,
    /// What was measured, how, on what; "vendor claim" where it is one.
    pub conditions: &'static str,
    /// Document and section / figure / table, or URL.
    pub source: &'static str,
}

/// Every figure of a profile, in table order.
pub fn for_profile(p: Profile) -> impl Iterator<Item = &'static Figure> {
    FIGURES.iter().filter(move |f| f.profile == p)
}

const fn fig(
    profile: Profile,
    metric: &'static str,
    value: f64,
    unit: &'static str,
    conditions: &'static str,
    source: &'static str,
) -> Figure {
    Figure {
        profile,
        metric,
        value,
        unit,
        conditions,
        source,
    }
}

macro_rules! seed000 {
    ($at:literal) => {
        concat!(
            "seed 000: Master's thesis \"Evaluating Hardware Offload of Network Functions ",
            "with SmartNICs\" (ConnectX-7, 2025), ",
            $at
        )
    };
}
macro_rules! seed001 {
    ($at:literal) => {
        concat!(
            "seed 001: Njavro et al., \"A DPU Solution for Container Overlay Networks\" ",
            "(BlueField-2, arXiv:2211.10495), ",
            $at
        )
    };
}
macro_rules! seed002 {
    ($at:literal) => {
        concat!(
            "seed 002: tutorial chapter \"SmartNICs: The Next Leap in Networking\", ",
            $at
        )
    };
}
macro_rules! seed003 {
    ($at:literal) => {
        concat!(
            "seed 003: Li et al., \"Performance Characteristics and Guidelines of Offloading ",
            "Middleboxes onto BlueField-2 DPU\" (IEEE Trans. Computers), ",
            $at
        )
    };
}
macro_rules! seed004 {
    ($at:literal) => {
        concat!(
            "seed 004: Netronome white paper \"Hardware Acceleration for Network Services\" ",
            "(2017), ",
            $at
        )
    };
}

use Profile::{Agilio, Bf2, Bf3, Cx7};

/// The table. Grouped by profile; within a profile, seeds first, then
/// vendor and other public material.
pub const FIGURES: &[Figure] = &[
    // ---------------------------------------------------------------- cx7
    fig(
        Cx7,
        "line_rate_gbps",
        400.0,
        "Gbps",
        "vendor specification (not a throughput measurement): single-port OSFP cards run \
         400GbE; dual-port QSFP112 cards run 2x200GbE or 2x100GbE; PCIe Gen5 x16 host link",
        "NVIDIA ConnectX-7 PCIe Stand-up Cards User Manual, Introduction, \
         https://docs.nvidia.com/networking/display/ConnectX7VPI/Introduction; \
         also ConnectX-7 for OCP 3.0 User Manual, Introduction (\"up to two ports of \
         NDR200 and 200GbE or a single port of NDR and 400GbE\")",
    ),
    fig(
        Cx7,
        "line_rate_gbps",
        100.0,
        "Gbps",
        "the ConnectX-7 model actually tested in seed 000 (100 Gbps, back-to-back QSFP \
         cable); the thesis notes the family supports up to 400 Gbps",
        seed000!("§3.1.1 \"NVIDIA ConnectX-7\" and §4.1.1 \"Hardware Components\""),
    ),
    fig(
        Cx7,
        "vxlan_ipsec_gbps",
        27.0,
        "Gbps",
        "VXLAN + IPsec with the IPsec crypto offloaded to ConnectX-7 (\"nearly 27Gbps\"), \
         first setup: Xeon Gold 5120 / Silver 4116, PCIe Gen3 x8 (below ConnectX-7's \
         Gen4 x16 need), 100G link; host CPU use rose with the offload (Fig. 5.15)",
        seed000!("§5.1.3 \"VXLAN + IPsec Offloading\", Figs. 5.15-5.16; §6.1.1"),
    ),
    fig(
        Cx7,
        "vxlan_ipsec_gbps_no_offload",
        2.5,
        "Gbps",
        "same VXLAN + IPsec test with the crypto in host software (\"around 2.5Gbps\"), \
         first setup; the offload gave ~980% (about tenfold)",
        seed000!("§5.1.3 \"VXLAN + IPsec Offloading\", Fig. 5.16; §6.1.1"),
    ),
    fig(
        Cx7,
        "offloaded_gbps",
        64.0,
        "Gbps",
        "iperf3 TCP through an SR-IOV VF (OVS rules offloaded), 12-24 parallel streams, \
         first setup: throughput levels off near 64 Gbps, capped by the PCIe Gen3 x8 slot; \
         line rate (100 Gbps) never reached; veth (no offload) similar throughput at much \
         higher host CPU",
        seed000!("§5.1.1 \"Virtual Ethernet vs SR-IOV\", Figs. 5.3-5.4; §6.1.1 (\"60-64Gbps\")"),
    ),
    // ---------------------------------------------------------------- bf2
    fig(
        Bf2,
        "line_rate_gbps",
        200.0,
        "Gbps",
        "vendor specification (not a throughput measurement): BlueField-2 integrates \
         \"an RDMA intelligent network adapter supporting up to 200Gb/s\" (ConnectX-6 Dx \
         front-end), PCIe Gen4 x16",
        "NVIDIA BlueField-2 Ethernet DPU User Guide, Introduction, \
         https://docs.nvidia.com/networking/display/bluefield2dpuenug/introduction; \
         seed 002 Table 2.1 lists BlueField-2 as \"2x 100Gbit/s\"",
    ),
    fig(
        Bf2,
        "offloaded_gbps",
        100.0,
        "Gbps",
        "DOCA Flow 5-tuple entries in the eSwitch (pipe depth 1), 1518-byte UDP frames from \
         DPDK-Pktgen over a back-to-back 100GbE link: 100 Gbps up to 4000k entries and 4000k \
         flows, UDP latency flat at ~10.5 us; bandwidth drops below 100 Gbps past pipe \
         depth 20 and by ~30% at depth 25 (Fig. 3(b))",
        seed003!("§IV.A.1 \"Benchmark of Flow Tables\", Fig. 3(a)-(b)"),
    ),
    fig(
        Bf2,
        "offloaded_pps_64b",
        107.33,
        "Mpps",
        "DOCA Flow eSwitch forwarding, 64-byte frames offered at 117 Mpps, 64k used 5-tuple \
         entries, per-entry counters enabled, pipe depth 1",
        seed003!("§IV.A.3, Table II (BlueField-2, Counter Enable, 64k)"),
    ),
    fig(
        Bf2,
        "offloaded_pps_64b",
        55.89,
        "Mpps",
        "as above with 4000k used entries, per-entry counters enabled: ~48% below the 64k \
         case; the paper attributes the drop to the per-entry counters",
        seed003!("§IV.A.1 and §IV.A.3, Table II (BlueField-2, Counter Enable, 4000k)"),
    ),
    fig(
        Bf2,
        "offloaded_pps_64b",
        108.86,
        "Mpps",
        "as above, 64k used entries, per-entry counters disabled",
        seed003!("§IV.A.3, Table II (BlueField-2, Counter Disable, 64k)"),
    ),
    fig(
        Bf2,
        "offloaded_pps_64b",
        93.24,
        "Mpps",
        "as above, 4000k used entries, per-entry counters disabled",
        seed003!("§IV.A.3, Table II (BlueField-2, Counter Disable, 4000k)"),
    ),
    fig(
        Bf2,
        "offloaded_pps_64b",
        58.6,
        "Mpps",
        "DOCA hairpin sample application offloaded to the eSwitch, TRex sending 64-byte \
         TCP frames on two 25 Gb/s ports (29.35 + 29.25 Mpps, ~79% line utilisation), \
         Arm cores idle; a tutorial screenshot, not a maximum",
        seed002!("§2.7.1, Figure 2.15(a)-(b)"),
    ),
    fig(
        Bf2,
        "offloaded_flows_max",
        4_000_000.0,
        "entries",
        "eSwitch flow-table capacity as the paper quotes NVIDIA's documentation (\"can \
         store up to 4 million flow entries\"); the paper tested up to 4000k 5-tuple \
         DOCA Flow entries",
        seed003!("§IV.A.1 \"Benchmark of Flow Tables\", Goals"),
    ),
    fig(
        Bf2,
        "offloaded_latency_us",
        11.03,
        "us",
        "TCP ping-pong (sockperf) forwarded by the eSwitch, back-to-back 100GbE; the \
         baseline of the paper's forwarding engines (hairpin 13.61, Arm testpmd 16.08)",
        seed003!("§IV.B.1, Table IV (eSwitch, TCP)"),
    ),
    fig(
        Bf2,
        "offloaded_latency_us",
        11.33,
        "us",
        "UDP ping-pong (sockperf) forwarded by the eSwitch, back-to-back 100GbE",
        seed003!("§IV.B.1, Table IV (eSwitch, UDP)"),
    ),
    fig(
        Bf2,
        "host_cpu_cores_saved",
        2.0,
        "cores",
        "stateless firewall: 20k 5-tuple rules in the eSwitch (DOCA Flow) instead of host \
         iptables INPUT chain, host receiving 10 TCP flows totalling 5 Gbps; iptables costs \
         ~2 extra cores (7x iperf's own receive cost) and loses ~85% bandwidth, ~90% packet \
         rate, +~90 us latency at 20k rules, the eSwitch stays flat",
        seed003!("§II.A, §IV.A intro and §IV.A.2 \"Performance Comparison\", Fig. 4(a)-(d)"),
    ),
    fig(
        Bf2,
        "ct_offload_cps",
        30_000.0,
        "connections/s",
        "OVS kernel datapath (TC) conntrack with hardware offload (TC-HW), dperf on 8 cores, \
         DUT and tester back-to-back at 100GbE; new connections are set up by OVS on the \
         Arm cores, only established ones go to the eSwitch",
        seed003!("§IV.C.1, Table VII (CPS, BF2, TC-HW = 30.00 Kcps)"),
    ),
    fig(
        Bf2,
        "ct_offload_cps",
        84_960.0,
        "connections/s",
        "OVS-DPDK (rte_flow) conntrack with hardware offload (RTE-HW), same test",
        seed003!("§IV.C.1, Table VII (CPS, BF2, RTE-HW = 84.96 Kcps)"),
    ),
    fig(
        Bf2,
        "ct_offload_cps_no_offload",
        64_950.0,
        "connections/s",
        "OVS kernel conntrack on the Arm cores without hardware offload (TC-SW), same test: \
         offload lowers the connection setup rate (no conntrack at all: 8000 Kcps)",
        seed003!("§IV.C.1, Table VII (CPS, BF2, TC-SW = 64.95 Kcps; NO-CT = 8000.00 Kcps)"),
    ),
    fig(
        Bf2,
        "ct_offload_tps",
        4_580.0,
        "transactions/s",
        "netperf TCP_CRR, single thread, OVS kernel conntrack with hardware offload (TC-HW); \
         TC-SW 5.52 Ktps, NO-CT 10.86 Ktps",
        seed003!("§IV.C.1, Table VII (TPS, BF2, TC-HW = 4.58 Ktps)"),
    ),
    fig(
        Bf2,
        "ct_connections_tested",
        1_000_000.0,
        "connections",
        "concurrent TCP connections (dperf) with conntrack offload on: within 1M, bandwidth \
         only ~6% below no conntrack; a tested range, not a hardware limit",
        seed003!("§IV.C.1, Fig. 8(b)"),
    ),
    fig(
        Bf2,
        "ct_offload_added_latency_us",
        1.2,
        "us",
        "ping-pong latency added by conntrack hardware offload (RTE-HW / TC-HW) over no \
         conntrack (sockperf, TCP and UDP)",
        seed003!("§IV.C.1, Fig. 8(a)"),
    ),
    fig(
        Bf2,
        "offloaded_gbps",
        100.0,
        "Gbps",
        "OvS-LB: DNAT L4 load balancer built on OVS conntrack offload on the DPU \"can \
         easily reach 100Gbps\" (LVS on the host: ~26 Gbps), dperf, 100GbE links",
        seed003!("§IV.C.2, Fig. 8(c)"),
    ),
    fig(
        Bf2,
        "host_cpu_cores_saved",
        12.0,
        "cores",
        "OvS-LB vs LVS forwarding 20 Gbps with 10k TCP connections: OvS-LB uses no host \
         CPU, LVS's use grows with the connection count",
        seed003!("§IV.C.2, Fig. 8(d)"),
    ),
    fig(
        Bf2,
        "ct_offload_cps",
        60_000.0,
        "connections/s",
        "OvS-LB (conntrack-offload DNAT load balancer) end to end with nginx back-ends; LVS \
         on the host reaches 130 Kcps (~53% more)",
        seed003!("§IV.C.2, Table VIII (CPS: OvS-LB 60.00, LVS 130.00 Kcps)"),
    ),
    fig(
        Bf2,
        "offloaded_gbps",
        90.0,
        "Gbps",
        "Docker overlay (VXLAN + bridge) moved to OVS on the DPU with ConnectX-6 VXLAN \
         offload, iPerf with 8 KB buffers over 100 GbE, 1-20 container pairs: \"all three \
         cases ... averaging around 90 Gb/s\" (host-to-host, default overlay, DPU); one \
         container on the default overlay: 80.95 Gb/s; values read from the text, the \
         figure's bars are not given as numbers",
        seed001!("§IV.B \"Throughput\", Fig. 4(c)"),
    ),
    // ---------------------------------------------------------------- bf3
    fig(
        Bf3,
        "line_rate_gbps",
        400.0,
        "Gbps",
        "vendor specification (not a throughput measurement): B3240 P-Series \"400GbE / NDR \
         IB (default mode)\", B3140L \"400GbE / NDR IB (default mode)\"; B3220 runs 200GbE, \
         B3210 100GbE; PCIe Gen5 x16",
        "NVIDIA DOCA Installation Guide for Linux v2.9.0, Supported Platforms, \
         https://docs.nvidia.com/doca/archive/2-9-0/NVIDIA+DOCA+Installation+Guide+for+Linux; \
         NVIDIA BlueField DPU BSP v4.2.2, Supported Platforms and Interoperability; seed 002 \
         Table 2.1 lists BlueField-3 as 400Gbit/s",
    ),
    fig(
        Bf3,
        "offloaded_pps_64b",
        119.85,
        "Mpps",
        "DOCA Flow eSwitch forwarding (DOCA 2.5.0), 64-byte frames, 64k used 5-tuple \
         entries, per-entry counters enabled, pipe depth 1, back-to-back 100GbE; unlike \
         BlueField-2 the rate does not fall with occupancy",
        seed003!("§IV.A.3, Table II (BlueField-3, Counter Enable, 64k)"),
    ),
    fig(
        Bf3,
        "offloaded_pps_64b",
        119.69,
        "Mpps",
        "as above with 4000k used entries, per-entry counters enabled (counters disabled: \
         119.74)",
        seed003!("§IV.A.3, Table II (BlueField-3, Counter Enable, 4000k)"),
    ),
    fig(
        Bf3,
        "flow_entries_tested",
        4_000_000.0,
        "entries",
        "largest DOCA Flow table the paper installed on BlueField-3 (4000k 5-tuple \
         entries); a tested size, not a published limit",
        seed003!("§IV.A.3, Tables II-III"),
    ),
    fig(
        Bf3,
        "offloaded_gbps",
        99.99,
        "Gbps",
        "DOCA Flow eSwitch, 4000k entries, back-to-back 100GbE: line rate at every pipe \
         depth tested (1-25)",
        seed003!("§IV.A.3, Table III (Bandwidth)"),
    ),
    fig(
        Bf3,
        "offloaded_pps_64b",
        66.82,
        "Mpps",
        "DOCA Flow eSwitch, 4000k entries, pipe depth 5 (depth 1: 119.69, depth 3: 110.67, \
         depth 10: 57.58)",
        seed003!("§IV.A.3, Table III (Packet Rate, depth 5)"),
    ),
    fig(
        Bf3,
        "offloaded_pps_64b",
        26.47,
        "Mpps",
        "DOCA Flow eSwitch, 4000k entries, pipe depth 25",
        seed003!("§IV.A.3, Table III (Packet Rate, depth 25)"),
    ),
    fig(
        Bf3,
        "offloaded_latency_us",
        13.66,
        "us",
        "UDP ping-pong through DOCA Flow eSwitch at pipe depth 1 (16.62 us at depth 25)",
        seed003!("§IV.A.3, Table III (Latency)"),
    ),
    fig(
        Bf3,
        "ct_offload_cps",
        45_310.0,
        "connections/s",
        "OVS kernel datapath (TC) conntrack with hardware offload (TC-HW), dperf, back-to-back \
         100GbE, AMD EPYC 7302 hosts",
        seed003!("§IV.C.3, Table VII (CPS, BF3, TC-HW = 45.31 Kcps)"),
    ),
    fig(
        Bf3,
        "ct_offload_cps",
        298_910.0,
        "connections/s",
        "OVS-DPDK (rte_flow) conntrack with hardware offload (RTE-HW), same test",
        seed003!("§IV.C.3, Table VII (CPS, BF3, RTE-HW = 298.91 Kcps)"),
    ),
    fig(
        Bf3,
        "ct_offload_cps_no_offload",
        110_010.0,
        "connections/s",
        "OVS kernel conntrack on the Arm cores without hardware offload (TC-SW), same test \
         (no conntrack at all: 10000.38 Kcps)",
        seed003!("§IV.C.3, Table VII (CPS, BF3, TC-SW = 110.01 Kcps; NO-CT = 10000.38 Kcps)"),
    ),
    fig(
        Bf3,
        "ct_offload_tps",
        4_670.0,
        "transactions/s",
        "netperf TCP_CRR, single thread, OVS kernel conntrack with hardware offload (TC-HW); \
         TC-SW 4.78 Ktps, NO-CT 6.69 Ktps",
        seed003!("§IV.C.3, Table VII (TPS, BF3, TC-HW = 4.67 Ktps)"),
    ),
    fig(
        Bf3,
        "offloaded_gbps",
        390.0,
        "Gbps",
        "third-party measurement (Amodo blog): raw throughput between two Dell R7615 \
         (EPYC 9354P) servers, each with a BlueField-3 DPU; not an OVS-offload test",
        "Amodo, \"The quest for 400G IPsec\", https://blog.amododesign.com/the-quest-for-400g-ipsec (TL;DR)",
    ),
    fig(
        Bf3,
        "ipsec_gbps",
        193.0,
        "Gbps",
        "third-party measurement (Amodo blog): IPsec with strongSwan between the same two \
         BlueField-3 servers, work in progress toward 400G (a patched BFB image)",
        "Amodo, \"The quest for 400G IPsec\", https://blog.amododesign.com/the-quest-for-400g-ipsec (TL;DR)",
    ),
    // ------------------------------------------------------------- agilio
    fig(
        Agilio,
        "line_rate_gbps",
        40.0,
        "Gbps",
        "survey table entry for Agilio CX (2015, ASIC, PCIe 3.0, 48/60-core NFP-4000): \
         40 Gbit/s",
        seed002!("§2.4, Table 2.1 \"An overview of SmartNIC ecosystem\""),
    ),
    fig(
        Agilio,
        "line_rate_gbps",
        20.0,
        "Gbps",
        "Agilio CX 2x10GbE (AMDA0096): sum of the two port speeds as the SKU names them; \
         vendor port configuration, not a throughput measurement",
        "Debian package firmware-netronome 20230210-5, description (\"Agilio CX 2x10GbE \
         firmware\", nic_AMDA0096-0001_2x10.nffw), \
         https://packages.debian.org/oldstable/firmware-netronome",
    ),
    fig(
        Agilio,
        "line_rate_gbps",
        50.0,
        "Gbps",
        "Agilio CX 2x25GbE (AMDA0099): sum of the two port speeds as the SKU names them; \
         vendor port configuration, not a throughput measurement",
        "Debian package firmware-netronome, description (\"Agilio CX 2x25GbE firmware\", \
         https://packages.debian.org/zh-cn/bookworm/i386/firmware-netronome) and file list \
         (netronome/bpf/nic_AMDA0099-0001_2x25.nffw, \
         https://packages.debian.org/it/bookworm-backports/all/firmware-netronome/filelist)",
    ),
    fig(
        Agilio,
        "line_rate_gbps",
        80.0,
        "Gbps",
        "Agilio CX 2x40GbE (AMDA0097): sum of the two port speeds as the SKU names them; \
         vendor port configuration, not a throughput measurement",
        "Debian package firmware-netronome 20230210-5, description (\"Agilio CX 2x40GbE \
         firmware\", nic_AMDA0097-0001_2x40.nffw), \
         https://packages.debian.org/oldstable/firmware-netronome",
    ),
    fig(
        Agilio,
        "offloaded_pps",
        51.5,
        "Mpps",
        "vendor benchmark on the 2x40G Agilio LX (NFP-6000, a sibling of the modelled CX): \
         L3 forwarding through OVS with the fast path offloaded, 100 OpenFlow entries / 100 \
         microflows, full OVS match/action set, <1% host CPU; packet size not stated",
        seed004!("\"Performance Metrics\", Figure 6 (L3 Forwarding Benchmark through OVS)"),
    ),
    fig(
        Agilio,
        "offloaded_pps",
        51.7,
        "Mpps",
        "as above (Agilio LX 2x40G, vendor benchmark), 1024 entries / 1024 microflows, <1% \
         host CPU",
        seed004!("\"Performance Metrics\", Figure 6"),
    ),
    fig(
        Agilio,
        "offloaded_pps",
        47.5,
        "Mpps",
        "as above (Agilio LX 2x40G, vendor benchmark), 9728 entries / 9728 microflows, <1% \
         host CPU",
        seed004!("\"Performance Metrics\", Figure 6"),
    ),
    fig(
        Agilio,
        "offloaded_pps",
        10.85,
        "Mpps",
        "as above (Agilio LX 2x40G, vendor benchmark), 65536 entries / 65536 microflows, \
         1-2% host CPU: the rate falls steeply past ~10k flows",
        seed004!("\"Performance Metrics\", Figure 6"),
    ),
    fig(
        Agilio,
        "offloaded_pps",
        70.0,
        "Mpps",
        "vendor claim: \"with action sets optimized to use cases, performance on the order \
         of 70Mpps can be achieved\" (Agilio LX 2x40G); no test details",
        seed004!("\"Performance Metrics\", notes under Figure 6"),
    ),
    fig(
        Agilio,
        "offloaded_pps_no_offload",
        10.57,
        "Mpps",
        "same vendor benchmark, traditional 2x40G NIC with OVS in the host kernel, 100 \
         entries / 100 microflows, ~40% host CPU (1024: 8.78 Mpps >50%; 9728: 7.6 Mpps 46%)",
        seed004!("\"Performance Metrics\", Figure 6"),
    ),
    fig(
        Agilio,
        "offloaded_pps_no_offload",
        6.06,
        "Mpps",
        "same vendor benchmark, kernel OVS on a traditional 2x40G NIC, 65536 entries / 65536 \
         microflows, 28% host CPU",
        seed004!("\"Performance Metrics\", Figure 6"),
    ),
    fig(
        Agilio,
        "host_cpu_pct",
        1.0,
        "% host CPU",
        "upper bound of host CPU load with OVS offloaded to the Agilio LX 2x40G at 100-9728 \
         flows (\"< 1% CPU\"; 1-2% at 65536 flows); vendor benchmark",
        seed004!("\"Performance Metrics\", Figure 6"),
    ),
    fig(
        Agilio,
        "host_cpu_pct_no_offload",
        40.0,
        "% host CPU",
        "host CPU load of kernel OVS on a traditional 2x40G NIC at 100 flows (\"~40% CPU\"; \
         >50% at 1024, 46% at 9728, 28% at 65536); vendor benchmark",
        seed004!("\"Performance Metrics\", Figure 6"),
    ),
    fig(
        Agilio,
        "host_cpu_reclaimed_pct",
        80.0,
        "% of OVS host CPU",
        "vendor claim: Agilio CX \"reclaim up to 80% of the server CPU resources previously \
         dedicated to OVS\"; test conditions in a white paper not read here",
        "Netronome, \"Open vSwitch Applications\" overview, Benchmarks, \
         https://www.netronome.com/solutions/open-vswitch-applications/overview/",
    ),
    fig(
        Agilio,
        "ovs_throughput_gain",
        5.0,
        "x",
        "vendor claim: Agilio CX delivers \"5X or more of the packet data throughput\" to \
         virtualized applications compared with unaccelerated OVS; test conditions not given \
         on the page",
        "Netronome, \"Open vSwitch Applications\" overview, Features and Benchmarks, \
         https://www.netronome.com/solutions/open-vswitch-applications/overview/",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_every_profile_has_a_line_rate() {
        for p in Profile::ALL {
            assert!(
                for_profile(p).any(|f| f.metric == "line_rate_gbps" && f.unit == "Gbps"),
                "{} has no line_rate_gbps figure",
                p.name()
            );
        }
    }

    #[test]
    fn rates_every_figure_is_sourced_and_described() {
        for f in FIGURES {
            assert!(!f.source.trim().is_empty(), "{f:?}: empty source");
            assert!(!f.conditions.trim().is_empty(), "{f:?}: empty conditions");
            assert!(!f.metric.trim().is_empty(), "{f:?}: empty metric");
            assert!(!f.unit.trim().is_empty(), "{f:?}: empty unit");
        }
    }

    #[test]
    fn rates_values_are_positive_and_finite() {
        for f in FIGURES {
            assert!(
                f.value.is_finite() && f.value > 0.0,
                "{f:?}: value not positive"
            );
        }
    }

    #[test]
    fn rates_for_profile_partitions_the_table() {
        let mut n = 0;
        for p in Profile::ALL {
            for f in for_profile(p) {
                assert_eq!(f.profile, p);
                n += 1;
            }
        }
        assert_eq!(n, FIGURES.len());
    }

    #[test]
    fn rates_no_figure_twice() {
        for (i, a) in FIGURES.iter().enumerate() {
            for b in &FIGURES[i + 1..] {
                assert!(
                    !(a.profile == b.profile
                        && a.metric == b.metric
                        && a.value == b.value
                        && a.conditions == b.conditions),
                    "duplicate figure {a:?}"
                );
            }
        }
    }

    #[test]
    fn rates_metric_names_are_snake_case() {
        for f in FIGURES {
            assert!(
                f.metric
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{}: metric not snake_case",
                f.metric
            );
        }
    }

    #[test]
    fn rates_metrics_are_documented() {
        for f in FIGURES {
            let base = f.metric.strip_suffix(NO_OFFLOAD).unwrap_or(f.metric);
            assert!(METRICS.contains(&base), "{}: not in METRICS", f.metric);
        }
    }

    #[test]
    fn rates_serialize_with_profile_name() {
        let f = for_profile(Profile::Bf2).next().unwrap();
        let v = serde_json::to_value(f).unwrap();
        assert_eq!(v["profile"], "bf2");
        assert!(v["source"].as_str().is_some_and(|s| !s.is_empty()));
    }
}
