//! The firmware capabilities `mlx5_core` reads (`MLX5_CAP_*`) and the
//! driver defaults it applies, per modelled NIC.
//!
//! Place in a packet's path: none; these are the values the modelled
//! driver consults while parsing a flower filter (stage 2) and while
//! allocating its flow tables (stage 3). Each value says where it comes
//! from; **GUESS** marks a value not read from a public document or the
//! driver source (firmware reports it at run time and no dump of it was
//! at hand). The driver-side constants (pools, group counts, register
//! widths) are from Linux 6.1 and hold for every profile.

use crate::Profile;

/// What firmware reports (and the driver defaults) for one NIC.
#[derive(Clone, Debug)]
pub struct Caps {
    pub profile: Profile,
    /// `MLX5_CAP_ESW_FLOWTABLE_FDB(log_max_ft_size)`: the largest FDB flow
    /// table, log2 of entries. Caps the table pools (`fs_ft_pool.c`).
    pub log_max_ft_size: u8,
    /// `MLX5_CAP_ESW_FLOWTABLE_FDB(max_modify_header_actions)`: header
    /// rewrites (and register writes) one rule can carry.
    pub max_modify_header_actions: u32,
    /// `MLX5_CAP_ESW_FLOWTABLE(fdb_ignore_flow_level)`: chains and prios
    /// are unmanaged tables, chain range `UINT_MAX - 1`
    /// (`lib/fs_chains.c:mlx5_chains_get_chain_range`).
    pub ignore_flow_level: bool,
    /// `esw_init_chains_offload_flags`: chains and prios supported (register
    /// loopback and `fdb_modify_header_fwd_to_table`).
    pub chains_and_prios: bool,
    /// `mlx5_eswitch_reg_c1_loopback_enabled`.
    pub reg_c1_loopback: bool,
    /// `MLX5_CAP_GEN(reg_c_preserve)`: registers survive split rules
    /// (mirroring with ct) and internal-port forwarding.
    pub reg_c_preserve: bool,
    /// `MLX5_CAP_ESW_FLOWTABLE_FDB(reformat_and_fwd_to_table)`.
    pub reformat_and_fwd_to_table: bool,
    /// `MLX5_CAP_ESW_FLOWTABLE_FDB(termination_table_raw_traffic)`.
    pub termination_table_raw_traffic: bool,
    /// `mlx5_esw_has_fwd_fdb`: split rules for mirroring.
    pub has_fwd_fdb: bool,
    /// `mlx5_eswitch_vlan_actions_supported(dev, n)`: the largest n (0 =
    /// emulated, 1 = one tag, 2 = push_vlan_2/pop_vlan_2).
    pub vlan_actions_depth: u8,
    /// `ft_field_support.outer_second_vid` (QinQ matching).
    pub outer_second_vid: bool,
    /// `ft_field_support.outer_ipv4_ttl`.
    pub outer_ipv4_ttl: bool,
    /// `flex_parser_protocols` bits: ICMP, ICMPv6, GENEVE.
    pub flex_icmp: bool,
    pub flex_icmpv6: bool,
    pub flex_geneve: bool,
    /// `MLX5_CAP_ESW(vxlan_encap_decap)`.
    pub vxlan_encap_decap: bool,
    /// `MLX5_CAP_ETH(max_vxlan_udp_ports) ?: 4`: UDP ports the NIC parses
    /// as VXLAN, 4789 included (`lib/vxlan.h`).
    pub max_vxlan_udp_ports: u8,
    /// `ft_field_support.outer_vxlan_vni`, `outer_geneve_vni`,
    /// `outer_geneve_oam`, `outer_geneve_opt_len`,
    /// `geneve_tlv_option_0_data`.
    pub outer_vxlan_vni: bool,
    pub outer_geneve_vni: bool,
    pub outer_geneve_oam: bool,
    pub outer_geneve_opt_len: bool,
    pub geneve_tlv_option_0_data: bool,
    /// `MLX5_CAP_GEN(max_geneve_tlv_options)`.
    pub max_geneve_tlv_options: u8,
    /// `MLX5_CAP_GEN(max_geneve_tlv_option_data_len)`, 4-byte words.
    pub max_geneve_tlv_option_data_len: u8,
    /// `MLX5_CAP_ESW(max_encap_header_size)`, bytes.
    pub max_encap_header_size: u32,
    /// `mlx5_tc_ct_init_check_support` passes (post_act, vlan actions,
    /// `fdb_modify_header_fwd_to_table`, register loopback).
    pub ct_offload: bool,
    /// `general_obj_types & FLOW_METER_ASO` (`en/tc/meter.c`).
    pub flow_meter_aso: bool,
    /// Meters the ASO objects can hold (`log_meter_aso_max_alloc`...).
    pub max_flow_meters: u64,
    /// `max_flow_counter_31_16 << 16 | max_flow_counter_15_0`.
    pub max_flow_counters: u64,
    /// Packet-reformat (encap header) contexts the firmware holds.
    pub max_packet_reformats: u64,
    /// `esw->params.large_group_num`: devlink `fdb_large_groups`, default
    /// `ESW_OFFLOADS_DEFAULT_NUM_GROUPS` (15, `eswitch.h`).
    pub large_group_num: u32,
    /// `mlx5e_tc_int_port_supported`: vport metadata matching and
    /// `reg_c_preserve`.
    pub int_port: bool,
}

impl Caps {
    /// The values per NIC. No `mlx5_core` capability dump of these NICs
    /// was at hand: every firmware value below is marked with where it
    /// comes from, and **GUESS** where it is inferred (from a feature the
    /// NIC is sold with, or a default) rather than read.
    pub fn for_profile(p: Profile) -> Caps {
        // ConnectX-6 Dx (BlueField-2) and ConnectX-7 (CX7, BlueField-3)
        // share every switchdev feature OVS 3.1 uses; they differ in the
        // values firmware reports.
        let cx7_class = !matches!(p, Profile::Bf2);
        Caps {
            profile: p,
            // GUESS: >= 22 on both. The driver's largest pool is 4M = 2^22
            // (fs_ft_pool.c), so any value >= 22 models the same; ASAP2 is
            // sold with FDB tables of millions of rules.
            log_max_ft_size: 23,
            // GUESS: CX-6 Dx 32 (DPDK's mlx5 PMD caps a flow's modify
            // actions at MLX5_MAX_MODIFY_NUM = 32), CX-7 class 64.
            max_modify_header_actions: if cx7_class { 64 } else { 32 },
            // GUESS (feature): fdb ignore_flow_level, register loopback
            // (vport metadata, the driver default when firmware allows it)
            // and fdb_modify_header_fwd_to_table: OVS recirculation (tc
            // chains) and ct offload are sold on CX-6 Dx and later; the
            // driver then logs "Supported tc chains and prios offload".
            ignore_flow_level: true,
            chains_and_prios: true,
            reg_c1_loopback: true,
            // GUESS (feature): OVS internal-port offload (6.1's int_port)
            // needs reg_c_preserve; documented for CX-6 Dx and later.
            reg_c_preserve: true,
            // GUESS (feature): decap + goto chain (OVN's Geneve path).
            reformat_and_fwd_to_table: true,
            // GUESS: uplink hairpin through termination tables.
            termination_table_raw_traffic: true,
            // GUESS (feature): port mirroring with rewrites.
            has_fwd_fdb: true,
            // GUESS: push_vlan_2/pop_vlan_2 (QinQ push/pop in the FDB).
            vlan_actions_depth: 2,
            // GUESS (feature): QinQ matching (outer_second_vid), TTL
            // matching, ICMP/ICMPv6/Geneve flex parsers, VXLAN and Geneve
            // encap/decap with VNI and one option match are ASAP2 features
            // of CX-6 Dx and later.
            outer_second_vid: true,
            outer_ipv4_ttl: true,
            flex_icmp: true,
            flex_icmpv6: true,
            flex_geneve: true,
            vxlan_encap_decap: true,
            // Driver: MLX5_CAP_ETH(max_vxlan_udp_ports) ?: 4 (lib/vxlan.h);
            // GUESS that firmware reports 0 or 4.
            max_vxlan_udp_ports: 4,
            outer_vxlan_vni: true,
            outer_geneve_vni: true,
            outer_geneve_oam: true,
            outer_geneve_opt_len: true,
            geneve_tlv_option_0_data: true,
            // GUESS: one TLV option (the driver matches one class/type at
            // a time anyway, lib/geneve.c) of up to 7 data words.
            max_geneve_tlv_options: 1,
            max_geneve_tlv_option_data_len: 7,
            // GUESS: 128 bytes (Ethernet + IPv6 + UDP + Geneve + options).
            max_encap_header_size: 128,
            // Driver: follows from the GUESSes above
            // (mlx5_tc_ct_init_check_support).
            ct_offload: true,
            // GUESS (feature): ASO flow meters on CX-6 Dx and later.
            flow_meter_aso: true,
            // GUESS: 2^16 meters.
            max_flow_meters: 1 << 16,
            // GUESS: 2^24 flow counters (max_flow_counter_31_16/15_0).
            max_flow_counters: 1 << 24,
            // GUESS: 2^20 packet-reformat contexts (no cap bounds them).
            max_packet_reformats: 1 << 20,
            // Driver default: ESW_OFFLOADS_DEFAULT_NUM_GROUPS (eswitch.h),
            // devlink fdb_large_groups.
            large_group_num: 15,
            // Driver: mlx5e_tc_int_port_supported = vport metadata match &&
            // reg_c_preserve (GUESSes above).
            int_port: true,
        }
    }
}
