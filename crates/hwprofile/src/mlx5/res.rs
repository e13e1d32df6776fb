//! Stage 3: what an accepted filter takes of the NIC, as Linux 6.1's
//! `mlx5_core` allocates it in switchdev mode.
//!
//! Place in a packet's path: none; bookkeeping behind
//! [`Driver::reserve`](crate::Driver::reserve). The model follows the
//! driver's allocators:
//!
//! - flow tables come from the firmware pools of `fs_ft_pool.c` (16M
//!   entries of virtual space per pool size 4M/1M/64K/128/1; a table
//!   asked with `POOL_NEXT_SIZE`, as `lib/fs_chains.c` creates every
//!   `(chain, prio, level)` table and the global post-action and ct
//!   tables, takes the largest size left that `log_max_ft_size` allows).
//!   At eSwitch init the root table (chain 0, prio 1), the post-action
//!   table and the ct and ct-nat tables take the four 4M tables before
//!   the first OVS filter; the slow-path FDB (assumed under ~1000 vports),
//!   the nf-flowtable chain and the restore table (2^16) take 64K ones,
//!   the vport-rx table a 128 one. NIC-mode tables of the uplink
//!   representor (TTC, ...) are not modelled (small pools);
//! - OVS 3.1 puts every filter of one protocol in one prio
//!   (`get_prio_for_tc_flower` with `multi_mask_per_prio`: IPv4 2, IPv6 3,
//!   others 4, 5, ... in order of first use), so a table is per
//!   `(chain, protocol)`; a rule needing a split (mirroring with
//!   rewrites) adds one at level 1 (`mlx5_eswitch_add_fwd_rule`);
//! - inside a table, rules whose match criteria are equal share a flow
//!   group (`fs_core.c`: `try_add_to_existing_fg`); a new criteria takes
//!   a new autogroup of `(size - 2) / (large_group_num + 1)` entries while
//!   fewer than `large_group_num` exist, then groups of one entry, while
//!   the table has room (`alloc_auto_flow_group`); an emptied group is
//!   destroyed. Fragmentation of the table is not modelled (a new group
//!   fits if the groups' total does);
//! - one flow counter per filter (on its last rule), two per meter, one
//!   per offloaded connection (`mlx5_tc_ct_shared_counter_get`);
//! - encap entries are shared by every filter with the same tunnel key
//!   (`mlx5e_encap_get`); tunnel mappings likewise (`mapping_add`);
//! - modify-header actions are checked per rule against the firmware's
//!   `max_modify_header_actions`.

use super::{src, Caps, Parsed};
use crate::tc::TcFlower;
use crate::{Refusal, Resource, Stage};
use std::collections::BTreeMap;

/// `FT_POOLS` (`fs_ft_pool.c`), largest first.
const FT_POOLS: [u64; 5] = [4 << 20, 1 << 20, 64 << 10, 128, 1];
/// `FT_SIZE`: each pool's virtual space.
const FT_SIZE: u64 = 16 << 20;
/// `FT_TBL_SZ` (`lib/fs_chains.c`): the nf-flowtable chain's table.
const FT_TBL_SZ: u64 = 64 << 10;
/// `TUNNEL_INFO_BITS_MASK` (`en_tc.h`): tunnel mapping ids.
const TUNNEL_IDS: u64 = (1 << 12) - 1;
/// `ENC_OPTS_BITS_MASK - 2` (`mlx5e_tc_esw_init`).
const ENC_OPTS_IDS: u64 = (1 << 11) - 1 - 2;
/// `num_reserved_entries` of a chains table (`mlx5_chains_create_table`).
const RESERVED: u64 = 2;

fn res(source: &'static str, reason: impl Into<String>) -> Refusal {
    Refusal::new(Stage::Resource, source, reason)
}

type TableKey = (u32, u32, u32);

#[derive(Clone, Debug)]
struct Group {
    mask: String,
    size: u64,
    used: u64,
}

#[derive(Clone, Debug)]
struct Table {
    size: u64,
    groups: Vec<Group>,
    big_groups: u32,
    slots: u64,
}

impl Table {
    fn max_fte(&self) -> u64 {
        self.size.saturating_sub(RESERVED)
    }
    fn group_size(&self, large: u32) -> u64 {
        self.max_fte() / (large as u64 + 1)
    }
    fn entries(&self) -> u64 {
        self.groups.iter().map(|g| g.used).sum()
    }
    /// The group a rule with `mask` would go to: `Ok(Some(i))` an existing
    /// one, `Ok(None)` a new one of the returned size.
    fn place(&self, mask: &str, large: u32) -> Result<Option<usize>, u64> {
        if let Some(i) = self
            .groups
            .iter()
            .position(|g| g.mask == mask && g.used < g.size)
        {
            return Ok(Some(i));
        }
        let gs = self.group_size(large);
        let size = if self.big_groups < large && gs > 0 {
            gs
        } else {
            1
        };
        if self.slots + size > self.max_fte() {
            return Err(size);
        }
        Ok(None)
    }
    fn insert(&mut self, mask: &str, large: u32) -> bool {
        match self.place(mask, large) {
            Ok(Some(i)) => {
                self.groups[i].used += 1;
                true
            }
            Ok(None) => {
                let gs = self.group_size(large);
                let size = if self.big_groups < large && gs > 0 {
                    gs
                } else {
                    1
                };
                if size == gs {
                    self.big_groups += 1;
                }
                self.slots += size;
                self.groups.push(Group {
                    mask: mask.to_string(),
                    size,
                    used: 1,
                });
                true
            }
            Err(_) => false,
        }
    }
    fn remove(&mut self, mask: &str, large: u32) {
        let gs = self.group_size(large);
        if let Some(i) = self
            .groups
            .iter()
            .rposition(|g| g.mask == mask && g.used > 0)
        {
            self.groups[i].used -= 1;
            if self.groups[i].used == 0 {
                let g = self.groups.remove(i);
                self.slots -= g.size;
                if g.size == gs && self.big_groups > 0 {
                    self.big_groups -= 1;
                }
            }
        }
    }
}

/// What one held filter took, to give back.
#[derive(Clone, Debug)]
struct Held {
    filter: TcFlower,
    p: Parsed,
    rules: Vec<(TableKey, String)>,
    counters: u64,
}

/// The pools' tables left.
#[derive(Clone, Debug)]
struct Pools {
    left: [u64; 5],
    max_ft: u64,
}

impl Pools {
    fn new(max_ft: u64) -> Pools {
        let mut left = [0; 5];
        for (i, s) in FT_POOLS.iter().enumerate() {
            left[i] = FT_SIZE / s;
        }
        Pools { left, max_ft }
    }
    /// `mlx5_ft_pool_get_avail_sz`: `desired` 0 is `POOL_NEXT_SIZE`.
    fn peek(&self, desired: u64) -> Option<usize> {
        let mut found = None;
        for i in (0..FT_POOLS.len()).rev() {
            if self.left[i] > 0 && FT_POOLS[i] >= desired && FT_POOLS[i] <= self.max_ft {
                found = Some(i);
                if desired != 0 {
                    break;
                }
            }
        }
        found
    }
    fn get(&mut self, desired: u64) -> u64 {
        match self.peek(desired) {
            Some(i) => {
                self.left[i] -= 1;
                FT_POOLS[i]
            }
            None => 0,
        }
    }
    fn put(&mut self, size: u64) {
        if let Some(i) = FT_POOLS.iter().position(|s| *s == size) {
            self.left[i] += 1;
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct State {
    pools: Pools,
    pools_at_init: [u64; 5],
    post_act_size: u64,
    ct_size: u64,
    tables: BTreeMap<TableKey, Table>,
    /// OVS's prio per protocol (never freed, as in OVS).
    prios: BTreeMap<u16, u32>,
    next_prio: u32,
    held: Vec<Held>,
    encaps: BTreeMap<String, u64>,
    tunnel_maps: BTreeMap<String, u64>,
    enc_opts_maps: BTreeMap<String, u64>,
    geneve: Option<((u16, u8), u64)>,
    vxlan_ports: BTreeMap<u16, u64>,
    meters: BTreeMap<u32, u64>,
    zones: BTreeMap<u16, u64>,
    counters: u64,
    post_act_entries: u64,
    ct_conns: u64,
    /// 128-entry tables per-flow objects take (pre-ct per zone, post-meter).
    small_tables: u64,
    /// `large_group_num`, for group sizes on release.
    large: u32,
}

impl State {
    pub fn new(caps: &Caps) -> State {
        let mut pools = Pools::new(1u64 << caps.log_max_ft_size.min(40));
        // esw_create_offloads_fdb_tables: the slow-path FDB, sized
        // 2 * (total_vports * 32 + 256) + total_vports * 2 + 3 entries: a
        // 64K table for fewer than ~1000 vports (assumed), and the
        // vport-rx offloads table (one entry per vport + 1: 128).
        pools.get(64 << 10);
        pools.get(128);
        // esw_chains_create: the nf-flowtable chain, then the root table.
        pools.get(FT_TBL_SZ);
        pools.get(0);
        // esw_create_restore_table: 1 << ESW_REG_C0_USER_DATA_METADATA_BITS.
        pools.get(1 << 16);
        // mlx5e_tc_esw_init: post_act, then ct and ct_nat (global tables).
        let post_act_size = if caps.ignore_flow_level {
            pools.get(0)
        } else {
            0
        };
        let ct_size = if caps.ct_offload && caps.ignore_flow_level {
            let a = pools.get(0);
            let b = pools.get(0);
            a.min(b)
        } else {
            0
        };
        State {
            pools_at_init: pools.left,
            pools,
            post_act_size,
            ct_size,
            tables: BTreeMap::new(),
            prios: BTreeMap::new(),
            next_prio: 4,
            held: Vec::new(),
            encaps: BTreeMap::new(),
            tunnel_maps: BTreeMap::new(),
            enc_opts_maps: BTreeMap::new(),
            geneve: None,
            vxlan_ports: BTreeMap::new(),
            meters: BTreeMap::new(),
            zones: BTreeMap::new(),
            counters: 0,
            post_act_entries: 0,
            ct_conns: 0,
            small_tables: 0,
            large: caps.large_group_num,
        }
    }

    fn prio_of(&self, protocol: u16) -> Option<u32> {
        match protocol {
            0x0800 => Some(2),
            0x86dd => Some(3),
            p => self.prios.get(&p).copied(),
        }
    }

    pub fn reserve(&mut self, caps: &Caps, f: &TcFlower, p: Parsed) -> Result<(), Refusal> {
        // Per-rule modify-header actions (offload_pedit_fields).
        for a in &p.attrs {
            if a.mod_hdr_actions() > caps.max_modify_header_actions {
                return Err(res(
                    src!("en_tc.c:offload_pedit_fields"),
                    "too many pedit actions, can't offload",
                ));
            }
        }
        // Geneve TLV option object (lib/geneve.c: one class/type).
        if let Some(opt) = p.geneve_opt {
            if let Some((have, n)) = self.geneve {
                if have != opt && n > 0 {
                    return Err(res(
                        src!("en/tc_tun_geneve.c:mlx5e_tc_tun_parse_geneve_options"),
                        "Matching on GENEVE options: failed creating TLV opt object",
                    ));
                }
            }
        }
        // VXLAN UDP ports (udp_tunnel_nic table: max_vxlan_udp_ports - 1
        // besides 4789).
        let extra_room = (caps.max_vxlan_udp_ports as u64).saturating_sub(1);
        let mut new_ports = 0;
        for (port, encap) in &p.vxlan_ports {
            if !self.vxlan_ports.contains_key(port) {
                new_ports += 1;
                if self.vxlan_ports.len() as u64 + new_ports > extra_room {
                    return Err(if *encap {
                        res(
                            src!("en/tc_tun_vxlan.c:mlx5e_tc_tun_init_encap_attr_vxlan"),
                            "vxlan udp dport was not registered with the HW",
                        )
                    } else {
                        res(
                            src!("en/tc_tun_vxlan.c:mlx5e_tc_tun_check_udp_dport_vxlan"),
                            "Matched UDP dst port is not registered as a VXLAN port",
                        )
                    });
                }
            }
        }
        // Tunnel mappings (mlx5e_get_flow_tunnel_id).
        if let Some(m) = &p.tunnel_mapping {
            if !self.tunnel_maps.contains_key(m) && self.tunnel_maps.len() as u64 >= TUNNEL_IDS {
                return Err(res(
                    src!("en_tc.c:mlx5e_get_flow_tunnel_id"),
                    format!("mlx5e_get_flow_tunnel_id: mapping_add: all {} tunnel mapping ids in use (-ENOSPC)", TUNNEL_IDS),
                ));
            }
        }
        if let Some(m) = &p.enc_opts_mapping {
            if !self.enc_opts_maps.contains_key(m)
                && self.enc_opts_maps.len() as u64 >= ENC_OPTS_IDS
            {
                return Err(res(
                    src!("en_tc.c:mlx5e_get_flow_tunnel_id"),
                    format!("mlx5e_get_flow_tunnel_id: mapping_add: all {} tunnel options mapping ids in use (-ENOSPC)", ENC_OPTS_IDS),
                ));
            }
        }
        // Encap entries (packet reformat contexts).
        let mut new_encaps: Vec<String> = Vec::new();
        for e in p.attrs.iter().flat_map(|a| a.encaps.iter()) {
            let id = e.id();
            if !self.encaps.contains_key(&id) && !new_encaps.contains(&id) {
                new_encaps.push(id);
            }
        }
        if self.encaps.len() as u64 + new_encaps.len() as u64 > caps.max_packet_reformats {
            return Err(res(
                src!("en/tc_tun.c:mlx5e_tc_tun_create_header_ipv4"),
                format!(
                    "mlx5_packet_reformat_alloc: all {} packet reformat contexts in use",
                    caps.max_packet_reformats
                ),
            ));
        }
        // Meters.
        let new_meter = p.meter.filter(|m| !self.meters.contains_key(m));
        if new_meter.is_some() && self.meters.len() as u64 >= caps.max_flow_meters {
            return Err(res(
                src!("en/tc/meter.c:__mlx5e_flow_meter_alloc"),
                "Failed to create flow meter ASO object",
            ));
        }
        // Counters: the filter's, two per new meter.
        let counters = 1 + if new_meter.is_some() { 2 } else { 0 };
        if self.counters + counters > caps.max_flow_counters {
            return Err(res(
                src!("en_tc.c:alloc_flow_attr_counter"),
                format!(
                    "alloc_flow_attr_counter: mlx5_fc_create: all {} flow counters in use",
                    caps.max_flow_counters
                ),
            ));
        }
        // Post-action rules: one per rule after a split.
        let post = p.attrs.len() as u64 - 1;
        if post > 0 && self.post_act_entries + post > self.post_act_size.saturating_sub(RESERVED) {
            return Err(res(
                src!("en/tc/post_act.c:mlx5e_tc_post_act_add"),
                "mlx5e_tc_post_act_add: post action table full (-ENOSPC)",
            ));
        }
        // 128-entry tables: two pre-ct tables per new zone, one post-meter
        // table per metered filter.
        let new_zone = p.ct_zone.filter(|z| !self.zones.contains_key(z));
        let small = if new_zone.is_some() { 2 } else { 0 } + if p.meter.is_some() { 1 } else { 0 };

        // Tables and groups, on a scratch copy: all or nothing.
        let mut pools = self.pools.clone();
        let mut tables = self.tables.clone();
        let mut prios = self.prios.clone();
        let mut next_prio = self.next_prio;
        let prio = match self.prio_of(p.protocol) {
            Some(x) => x,
            None => {
                let x = next_prio;
                next_prio += 1;
                prios.insert(p.protocol, x);
                x
            }
        };
        // mlx5e_tc_add_fdb_flow: without ignore_flow_level the FDB has
        // FDB_TC_MAX_PRIO (16) prios; OVS numbers them per protocol.
        if !caps.ignore_flow_level && prio > 16 {
            return Err(Refusal::new(
                Stage::Driver,
                src!("en_tc.c:mlx5e_tc_add_fdb_flow"),
                "Requested priority is out of supported range",
            ));
        }
        let mut rules = Vec::new();
        let levels: &[u32] = if p.split { &[0, 1] } else { &[0] };
        for &level in levels {
            let key = (f.chain, prio, level);
            if let std::collections::btree_map::Entry::Vacant(slot) = tables.entry(key) {
                let size = pools.get(0);
                if size == 0 {
                    return Err(res(
                        src!("lib/fs_chains.c:mlx5_chains_create_table"),
                        format!(
                            "Failed to create chains table err -28 (chain: {}, prio: {}, level: {}, size: 0)",
                            f.chain, prio, level
                        ),
                    ));
                }
                slot.insert(Table {
                    size,
                    groups: Vec::new(),
                    big_groups: 0,
                    slots: 0,
                });
            }
            let t = tables.get_mut(&key).expect("inserted above");
            if !t.insert(&p.mask, caps.large_group_num) {
                let size = match t.place(&p.mask, caps.large_group_num) {
                    Err(s) => s,
                    Ok(_) => 1,
                };
                return Err(res(
                    src!("fs_core.c:alloc_auto_flow_group"),
                    format!(
                        "alloc_auto_flow_group: no room for a new flow group of {} entries in the table of chain {} prio {} level {} ({} entries, {} groups): -ENOSPC",
                        size,
                        f.chain,
                        prio,
                        level,
                        t.size,
                        t.groups.len()
                    ),
                ));
            }
            rules.push((key, p.mask.clone()));
        }
        for _ in 0..small {
            if pools.get(2) == 0 {
                return Err(res(
                    src!("en/tc_ct.c:__mlx5_tc_ct_flow_offload"),
                    "Failed to offload ct flow, err -28",
                ));
            }
        }

        // Commit.
        self.pools = pools;
        self.tables = tables;
        self.prios = prios;
        self.next_prio = next_prio;
        self.small_tables += small;
        if let Some(opt) = p.geneve_opt {
            let n = self.geneve.map(|(_, n)| n).unwrap_or(0);
            self.geneve = Some((opt, n + 1));
        }
        for (port, _) in &p.vxlan_ports {
            *self.vxlan_ports.entry(*port).or_default() += 1;
        }
        if let Some(m) = &p.tunnel_mapping {
            *self.tunnel_maps.entry(m.clone()).or_default() += 1;
        }
        if let Some(m) = &p.enc_opts_mapping {
            *self.enc_opts_maps.entry(m.clone()).or_default() += 1;
        }
        for e in p.attrs.iter().flat_map(|a| a.encaps.iter()) {
            *self.encaps.entry(e.id()).or_default() += 1;
        }
        if let Some(m) = p.meter {
            *self.meters.entry(m).or_default() += 1;
        }
        if let Some(z) = p.ct_zone {
            *self.zones.entry(z).or_default() += 1;
        }
        self.counters += counters;
        self.post_act_entries += post;
        self.held.push(Held {
            filter: f.clone(),
            p,
            rules,
            counters: 1,
        });
        Ok(())
    }

    pub fn release(&mut self, f: &TcFlower) {
        let Some(i) = self.held.iter().position(|h| &h.filter == f) else {
            return;
        };
        let h = self.held.remove(i);
        let large = self.large_groups();
        for (key, mask) in &h.rules {
            if let Some(t) = self.tables.get_mut(key) {
                t.remove(mask, large);
                if t.groups.is_empty() {
                    // mlx5_chains_put_table: the last rule's table goes.
                    let size = t.size;
                    self.tables.remove(key);
                    self.pools.put(size);
                }
            }
        }
        self.counters = self.counters.saturating_sub(h.counters);
        self.post_act_entries = self
            .post_act_entries
            .saturating_sub(h.p.attrs.len() as u64 - 1);
        let mut small = 0;
        if let Some(m) = h.p.meter {
            small += 1;
            // The meter's red and green counters go with its last user.
            if dec(&mut self.meters, &m) {
                self.counters = self.counters.saturating_sub(2);
            }
        }
        if let Some(z) = h.p.ct_zone {
            if dec(&mut self.zones, &z) {
                small += 2;
            }
        }
        for _ in 0..small {
            self.pools.put(128);
        }
        self.small_tables = self.small_tables.saturating_sub(small);
        if h.p.geneve_opt.is_some() {
            if let Some((o, n)) = self.geneve {
                self.geneve = if n > 1 { Some((o, n - 1)) } else { None };
            }
        }
        for (port, _) in &h.p.vxlan_ports {
            dec(&mut self.vxlan_ports, port);
        }
        if let Some(m) = &h.p.tunnel_mapping {
            dec(&mut self.tunnel_maps, m);
        }
        if let Some(m) = &h.p.enc_opts_mapping {
            dec(&mut self.enc_opts_maps, m);
        }
        for e in h.p.attrs.iter().flat_map(|a| a.encaps.iter()) {
            dec(&mut self.encaps, &e.id());
        }
        if self.zones.is_empty() {
            self.counters = self.counters.saturating_sub(self.ct_conns);
            self.ct_conns = 0;
        }
    }

    fn large_groups(&self) -> u32 {
        self.large
    }

    pub fn account_ct(&mut self, caps: &Caps, n: u64) -> u64 {
        // Connections are offloaded only through a zone some held filter's
        // ct action registered (mlx5_tc_ct_add_ft_cb).
        self.counters = self.counters.saturating_sub(self.ct_conns);
        self.ct_conns = 0;
        if self.zones.is_empty() || self.ct_size == 0 {
            return 0;
        }
        // Each direction is one rule in the ct table and one in ct_nat
        // (mlx5_tc_ct_entry_add_rules).
        let by_table = self.ct_size.saturating_sub(RESERVED) / 2;
        let by_counters = caps.max_flow_counters.saturating_sub(self.counters);
        let fit = n.min(by_table).min(by_counters);
        self.ct_conns = fit;
        self.counters += fit;
        fit
    }

    pub fn resources(&self, caps: &Caps) -> BTreeMap<String, Resource> {
        let mut r = BTreeMap::new();
        let mut put = |name: &str, used: u64, limit: u64| {
            r.insert(name.to_string(), Resource { used, limit });
        };
        let entries: u64 = self.tables.values().map(|t| t.entries()).sum();
        let cap: u64 = self.tables.values().map(|t| t.max_fte()).sum();
        put("fdb_entries", entries, cap);
        let groups: u64 = self.tables.values().map(|t| t.groups.len() as u64).sum();
        let max_groups: u64 = self
            .tables
            .values()
            .map(|t| {
                let gs = t.group_size(caps.large_group_num);
                let big = caps.large_group_num as u64;
                big + t.max_fte().saturating_sub(big * gs)
            })
            .sum();
        put("flow_groups", groups, max_groups);
        let creatable: u64 = (0..4)
            .filter(|i| FT_POOLS[*i] <= self.pools.max_ft)
            .map(|i| self.pools_at_init[i])
            .sum();
        let left: u64 = (0..4)
            .filter(|i| FT_POOLS[*i] <= self.pools.max_ft)
            .map(|i| self.pools.left[i])
            .sum();
        put("fdb_tables", creatable - left, creatable);
        for (i, name) in ["ft_pool_4m", "ft_pool_1m", "ft_pool_64k", "ft_pool_128"]
            .iter()
            .enumerate()
        {
            put(
                name,
                FT_SIZE / FT_POOLS[i] - self.pools.left[i],
                FT_SIZE / FT_POOLS[i],
            );
        }
        let max_rule = self
            .held
            .iter()
            .flat_map(|h| h.p.attrs.iter().map(|a| a.mod_hdr_actions() as u64))
            .max()
            .unwrap_or(0);
        put(
            "modify_header_actions_max_per_rule",
            max_rule,
            caps.max_modify_header_actions as u64,
        );
        put("flow_counters", self.counters, caps.max_flow_counters);
        put(
            "encap_entries",
            self.encaps.len() as u64,
            caps.max_packet_reformats,
        );
        put("tunnel_mappings", self.tunnel_maps.len() as u64, TUNNEL_IDS);
        put(
            "tunnel_enc_opts_mappings",
            self.enc_opts_maps.len() as u64,
            ENC_OPTS_IDS,
        );
        put("geneve_tlv_options", self.geneve.is_some() as u64, 1);
        put(
            "vxlan_udp_ports",
            1 + self.vxlan_ports.len() as u64,
            caps.max_vxlan_udp_ports as u64,
        );
        put(
            "flow_meters",
            self.meters.len() as u64,
            caps.max_flow_meters,
        );
        put("ct_zones", self.zones.len() as u64, 1 << 16);
        put(
            "ct_entries",
            self.ct_conns * 2,
            self.ct_size.saturating_sub(RESERVED),
        );
        put(
            "post_act_entries",
            self.post_act_entries,
            self.post_act_size.saturating_sub(RESERVED),
        );
        r
    }
}

/// Drop one reference; true when the last went.
fn dec<K: Ord + Clone>(m: &mut BTreeMap<K, u64>, k: &K) -> bool {
    if let Some(n) = m.get_mut(k) {
        *n -= 1;
        if *n == 0 {
            m.remove(k);
            return true;
        }
    }
    false
}
