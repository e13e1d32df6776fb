// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * xdp_dp: nicflow's XDP datapath (issue 5, "offload the fast path to
 * XDP/eBPF"). The Rust side is crates/nicflow/src/offload/xdp/; the design
 * is written up in docs/offload.md.
 *
 * Where it sits in a frame's path (once wired into the ports):
 *
 *   wire / veth peer -> driver (native XDP) -> **this program**:
 *     parse -> struct dp_key (same meaning as nicflow_flow::FlowKey)
 *     -> for each active mask, in slot order: lookup {slot, key & mask}
 *        in dp_flows
 *     hit  -> count, execute the flow's actions in the kernel
 *             (rewrites, VLAN push/pop, then XDP_REDIRECT through the
 *             dp_tx_ports DEVMAP or XDP_DROP)
 *     miss -> XSKMAP (the port's AF_XDP socket for this rx queue, exactly
 *             what xsk_redirect.c does) -> nicflow's userspace datapath,
 *             which may then install the flow here.
 *
 * Rules this program keeps so that a hit is indistinguishable from what the
 * userspace executor (crates/nicflow/src/datapath/execute.rs) would do:
 *
 *  - Anything the parser here does not handle the way nicflow_packet::parse
 *    does (IPv6 extension headers, more than two VLAN tags, malformed
 *    headers, headers outside the linear part of a multi-buffer frame) is a
 *    miss: userspace sees the frame and decides (and counts parse drops).
 *  - Conditions that would make the kernel unable to finish the actions
 *    exactly (TTL <= 1 for dec_ttl, an SCTP port rewrite whose CRC32c we do
 *    not recompute, an output slot that vanished) are checked *before*
 *    anything is written or counted, and the frame is handed to userspace
 *    untouched.
 *  - Checksums are patched with the same RFC 1624 eqn. 3 arithmetic as
 *    nicflow_packet::checksum::update16/update32/update_bytes, including
 *    "old == new leaves the checksum alone" and UDP's zero rule, so the
 *    output frames are bit-identical (the differential test checks that).
 *
 * Verifier notes: both loops are bounded (masks: DP_MAX_MASKS_CAP, actions:
 * DP_MAX_ACTIONS) and not unrolled. Header offsets that change while the
 * action list runs (VLAN push/pop) live in a per-CPU scratch map rather
 * than on the stack: every read of a map value is an unknown scalar to the
 * verifier, re-bounded by an explicit check, so the states at the top of
 * the action loop are all equivalent and get pruned instead of multiplying
 * with every push/pop combination.
 *
 * Loaded as "xdp.frags": only headers in the linear part are read, the
 * frame length (for counters and IP length validation) comes from
 * bpf_xdp_get_buff_len.
 *
 * Build: crates/nicflow/build.rs (clang -O2 -g -target bpf).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/* Upper bound of the mask loop; the map's real size is set at load time
 * (EbpfLoader::set_max_entries("dp_masks", n), n <= this). */
#define DP_MAX_MASKS_CAP 64
/* Actions per flow. Mirrored by offload::xdp::layout::MAX_ACTIONS. */
#define DP_MAX_ACTIONS 16
/* Deepest L3 offset handled: Ethernet + 2 tags parsed + pushes. */
#define DP_MAX_L3_OFF 128
/* Deepest L4 offset handled: L3 offset + 60 bytes of IPv4 header / 40 IPv6. */
#define DP_MAX_L4_OFF (DP_MAX_L3_OFF + 60)

/* ---- the key: same semantics as nicflow_flow::FlowKey (key.rs) -------- */
/* Integers in host order, MACs and IPv6 addresses as network-order bytes,
 * vlan_tci with 0x1000 = "tag present", ICMP type/code in tp_src/tp_dst,
 * ARP opcode (<= 0xff) in nw_proto and ARP IPs in nw_src/nw_dst. 112 bytes,
 * no padding: the layout is mirrored by offload::xdp::layout::DpKey. */
struct dp_key_fields {
	__u32 in_port;		/* 0 */
	__u16 dl_type;		/* 4 */
	__u16 vlan_tci;		/* 6 */
	__u8 dl_dst[6];		/* 8 */
	__u16 vlan_tci2;	/* 14 */
	__u8 dl_src[6];		/* 16 */
	__u16 tp_src;		/* 22 */
	__u8 arp_sha[6];	/* 24 */
	__u16 tp_dst;		/* 30 */
	__u8 arp_tha[6];	/* 32 */
	__u16 tcp_flags;	/* 38 */
	__u32 nw_src;		/* 40 */
	__u32 nw_dst;		/* 44 */
	__u8 ipv6_src[16];	/* 48 */
	__u8 ipv6_dst[16];	/* 64 */
	__u32 ipv6_label;	/* 80 */
	__u8 nw_proto;		/* 84 */
	__u8 nw_tos;		/* 85 */
	__u8 nw_ttl;		/* 86 */
	__u8 nw_frag;		/* 87 */
	/* Tunnel metadata of a frame decapsulated here (0 otherwise):
	 * FlowKey's tun_* (TUN_F_* flags, OVS values). */
	__u64 tun_id;		/* 88 */
	__u32 tun_src;		/* 96, host order */
	__u32 tun_dst;		/* 100 */
	__u16 tun_flags;	/* 104 */
	__u8 tun_pad[6];	/* 106, always 0 */
};

#define DP_KEY_WORDS 14
union dp_key {
	struct dp_key_fields f;
	__u64 w[DP_KEY_WORDS];
};
_Static_assert(sizeof(struct dp_key_fields) == 112, "dp_key layout");
_Static_assert(sizeof(union dp_key) == 112, "dp_key layout");

/* dp_flows key: the key masked by the mask in slot mask_idx. */
struct dp_flow_key {
	__u32 mask_idx;
	__u32 pad;	/* always 0 */
	union dp_key key;
};
_Static_assert(sizeof(struct dp_flow_key) == 120, "dp_flow_key layout");

/* dp_masks value. active = 0: free slot, skipped. */
struct dp_mask {
	__u32 active;
	__u32 pad;
	union dp_key mask;
};
_Static_assert(sizeof(struct dp_mask) == 120, "dp_mask layout");

/* ---- actions ----------------------------------------------------------- */
enum {
	DP_OP_NONE = 0,
	DP_OP_OUTPUT = 1,	/* arg32 = dp_tx_ports slot; last action */
	DP_OP_DROP = 2,		/* arg16 = reason (informational) */
	DP_OP_SET_ETH_SRC = 3,	/* data[0..6] */
	DP_OP_SET_ETH_DST = 4,
	DP_OP_SET_IPV4_SRC = 5,	/* arg32, host order */
	DP_OP_SET_IPV4_DST = 6,
	DP_OP_SET_IPV6_SRC = 7,	/* data[0..16] */
	DP_OP_SET_IPV6_DST = 8,
	DP_OP_SET_TOS = 9,	/* arg16 low byte */
	DP_OP_SET_TTL = 10,	/* arg16 low byte */
	DP_OP_DEC_TTL = 11,
	DP_OP_SET_TP_SRC = 12,	/* arg16 */
	DP_OP_SET_TP_DST = 13,
	DP_OP_PUSH_VLAN = 14,	/* arg16 = tci, arg32 = tpid */
	DP_OP_POP_VLAN = 15,
	DP_OP_SET_VLAN_TCI = 16,	/* arg16 = tci (VID + PCP; DEI kept) */
	DP_OP_SET_ARP_SPA = 17,	/* arg32 */
	DP_OP_SET_ARP_TPA = 18,
	DP_OP_SET_ARP_SHA = 19,	/* data[0..6] */
	DP_OP_SET_ARP_THA = 20,
	/* Encapsulate with dp_tun_tx[arg32]'s header and redirect to its
	 * underlay; last action. VNI: arg16 = DP_TUN_VNI_*. */
	DP_OP_TUNNEL_OUTPUT = 21,
};

/* Where DP_OP_TUNNEL_OUTPUT takes the VNI from. */
#define DP_TUN_VNI_TEMPLATE	0	/* the port's fixed key (in the template) */
#define DP_TUN_VNI_ACTION	1	/* data[0..4], host order: set_tunnel */
#define DP_TUN_VNI_KEY		2	/* the frame's tun_id (0 if not from a tunnel) */

struct dp_action {
	__u8 op;
	__u8 pad;
	__u16 arg16;
	__u32 arg32;
	__u8 data[16];
};
_Static_assert(sizeof(struct dp_action) == 24, "dp_action layout");

/* Flow flags: runtime pre-checks, set by the encoder. */
#define DP_F_DEC_TTL	0x01	/* has DEC_TTL: TTL/hop limit <= 1 -> userspace */
#define DP_F_SET_TP	0x02	/* has SET_TP_*: SCTP frame -> userspace */
#define DP_F_OUTPUT	0x04	/* has OUTPUT to out_slot: empty slot -> userspace */
#define DP_F_TUNNEL	0x08	/* has TUNNEL_OUTPUT via dp_tun_tx[out_slot]: no
				 * resolved header, no underlay slot or an
				 * inner frame over the tunnel's MTU -> userspace */

/* dp_flows value: counters (updated here with atomic adds, read by
 * userspace) then the action list. */
struct dp_flow {
	__u64 packets;
	__u64 bytes;
	__u64 used_ns;		/* bpf_ktime_get_ns() of the last hit, 0 = never */
	__u16 tcp_flags;	/* OR of the TCP flags seen (racy OR, see docs) */
	__u8 n_actions;
	__u8 flags;		/* DP_F_* */
	__u32 out_slot;
	struct dp_action actions[DP_MAX_ACTIONS];
};
_Static_assert(sizeof(struct dp_flow) == 32 + 24 * DP_MAX_ACTIONS, "dp_flow layout");

/* dp_config.flags: per-flow packet/byte counters off (the table-scale
 * experiment's "counters off"; the last-used time is still stored, aging
 * needs it, and it is a plain store rather than two atomic adds). */
#define DP_CFG_NO_COUNTERS 1

struct dp_config {
	__u32 n_masks;	/* slots 0..n_masks-1 are tried */
	__u32 flags;	/* DP_CFG_* */
};

/* dp_port.flags: the interface is a tunnel underlay; frames for one of
 * the dp_tun_rx endpoints are decapsulated here and looked up as received
 * on that endpoint's tunnel port. */
#define DP_PORT_UNDERLAY 1

struct dp_port {
	__u32 in_port;	/* nicflow datapath port number of this interface */
	/* First dp_xsks slot of this interface: a miss on rx queue q goes to
	 * dp_xsks[xsk_base + q]. One program instance serves every port of a
	 * bridge, and every veth has its single queue 0, so the XSKMAP cannot
	 * be keyed by the queue alone (an AF_XDP socket only accepts frames of
	 * the interface and queue it is bound to; any other is dropped). */
	__u32 xsk_base;
	__u32 flags;	/* DP_PORT_* */
	__u8 mac[6];	/* underlay: the interface's MAC (outer destination) */
	__u16 mtu;	/* underlay: its MTU (longer frames: userspace) */
};
_Static_assert(sizeof(struct dp_port) == 20, "dp_port layout");

/* ---- tunnels -------------------------------------------------------------
 * Decap (underlay rx): IPv4/UDP/VXLAN or Geneve without options, every
 * check of nicflow_packet::tunnel::parse that can fail done here too (and a
 * frame it cannot decide goes to userspace whole, which decides and counts).
 * Encap: the 50-byte outer header built by userspace with
 * nicflow_packet::tunnel::encap (resolved MACs, addresses, TTL, TOS, DF,
 * UDP port, tunnel header), patched per frame with the lengths, the IPv4
 * header checksum, the entropy source port and the VNI. */
#define DP_TUN_HDR_LEN 50	/* Ethernet 14 + IPv4 20 + UDP 8 + VXLAN/Geneve 8 */
#define DP_VNI_ANY 0xffffffff	/* dp_tun_rx.vni of a key=flow port */
enum { DP_TUN_VXLAN = 1, DP_TUN_GENEVE = 2 };

struct dp_tun_rx_key {
	__u32 ifindex;	/* the underlay */
	__u32 local;	/* outer destination, host order */
	__u32 remote;	/* outer source */
	__u32 vni;	/* or DP_VNI_ANY */
	__u16 dst_port;
	__u16 pad;	/* always 0 */
};
_Static_assert(sizeof(struct dp_tun_rx_key) == 20, "dp_tun_rx_key layout");

struct dp_tun_rx {
	__u32 in_port;	/* the tunnel port */
	__u32 kind;	/* DP_TUN_* */
};

/* Userspace rewrites an entry in place (BPF_F_LOCK: under the entry's
 * lock) when the remote's MAC or the underlay changes; the program copies
 * what it needs into its per-CPU scratch under the same lock, so a frame
 * is encapsulated with one whole header, never half an old and half a new
 * one. */
struct dp_tun_tx {
	struct bpf_spin_lock lock;
	__u32 valid;	/* 0 while the remote's MAC is unresolved */
	__u32 tx_slot;	/* dp_tx_ports slot of the underlay */
	__u32 inner_mtu;	/* largest inner frame minus its Ethernet header */
	__u8 hdr[DP_TUN_HDR_LEN];	/* lengths, IP checksum, UDP source and VNI 0 */
	__u16 pad;
};
_Static_assert(sizeof(struct dp_tun_tx) == 68, "dp_tun_tx layout");

/* The scratch copy of a dp_tun_tx entry. */
struct dp_tun_copy {
	__u32 valid;
	__u32 tx_slot;
	__u32 inner_mtu;
	__u8 hdr[DP_TUN_HDR_LEN];
	__u16 pad;
};

/* Header offsets while the actions run; see the verifier notes above. */
struct dp_scratch {
	__u32 l3_off;
	__u32 l4_off;
	__u32 l3;	/* DP_L3_* */
	__u32 l4;	/* DP_L4_* */
	__u32 later_frag;
	__u32 pad;
	/* The frame's key and the masked lookup key: 184 bytes that would
	 * not fit the 512-byte BPF stack next to the parser's locals. */
	union dp_key key;
	struct dp_flow_key hk;
	struct dp_tun_copy tun;	/* the flow's tunnel header, when it has one */
};

enum { DP_L3_NONE = 0, DP_L3_IPV4, DP_L3_IPV6, DP_L3_ARP, DP_L3_OTHER };
enum { DP_L4_NONE = 0, DP_L4_TCP, DP_L4_UDP, DP_L4_ICMP, DP_L4_ICMPV6, DP_L4_SCTP, DP_L4_OTHER };

/* Slots for DP_OP_DROP reasons (userspace DropReason::ALL must fit). */
#define DP_DROP_REASONS 4

/* Global counters (per CPU, summed by userspace). */
enum {
	DP_STAT_RX = 0,		/* frames seen */
	DP_STAT_HIT,		/* flow found and executed */
	DP_STAT_MISS,		/* parsed, no flow: to userspace */
	DP_STAT_UNPARSED,	/* not parsed here (ext headers, malformed, ...): to userspace */
	DP_STAT_NO_PORT,	/* interface has no dp_ports entry: to userspace */
	DP_STAT_PUNT,		/* flow found but a pre-check failed: to userspace */
	DP_STAT_OUTPUT,		/* redirected through dp_tx_ports */
	DP_STAT_DROP,		/* dropped by a flow */
	DP_STAT_ABORTED,	/* internal error after a rewrite started (should stay 0) */
	DP_STAT_DECAP,		/* tunnel frames decapsulated (hit or not) */
	DP_STAT_ENCAP,		/* frames encapsulated and sent to an underlay */
	/* Drops by reason, as the userspace datapath counts them (`nicflow
	 * stats` adds these to its own): */
	DP_STAT_DROP_POLICY,	/* empty action list (userspace: "policy") */
	DP_STAT_DROP_REASON,	/* DP_OP_DROP, + arg16 (a DropReason index) */
	DP_STAT_N = DP_STAT_DROP_REASON + DP_DROP_REASONS,
};

/* ---- maps (sizes overridable by the loader) ----------------------------- */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct dp_flow_key);
	__type(value, struct dp_flow);
} dp_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct dp_mask);
} dp_masks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_config);
} dp_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);	/* ifindex */
	__type(value, struct dp_port);
} dp_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} dp_tx_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} dp_xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct dp_tun_rx_key);
	__type(value, struct dp_tun_rx);
} dp_tun_rx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);	/* tunnel slot */
	__type(value, struct dp_tun_tx);
} dp_tun_tx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DP_STAT_N);
	__type(key, __u32);
	__type(value, __u64);
} dp_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_scratch);
} dp_scratch SEC(".maps");

/* ---- helpers ------------------------------------------------------------ */
static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&dp_stats, &idx);

	if (v)
		*v += 1;	/* per-CPU: no atomics needed */
}

static __always_inline __u16 rd16(const __u8 *p)
{
	return ((__u16)p[0] << 8) | p[1];
}

static __always_inline __u32 rd32(const __u8 *p)
{
	return ((__u32)p[0] << 24) | ((__u32)p[1] << 16) | ((__u32)p[2] << 8) | p[3];
}

static __always_inline void wr16(__u8 *p, __u16 v)
{
	p[0] = v >> 8;
	p[1] = v;
}

static __always_inline void wr32(__u8 *p, __u32 v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

/* Fold to 16 bits with end-around carry; 0 only for a zero sum. Same
 * result as nicflow_packet::checksum::fold for any congruent sum. */
static __always_inline __u16 csum_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/* RFC 1624 eqn. 3, as checksum::update16. */
static __always_inline __u16 csum_upd16(__u16 csum, __u16 old, __u16 new)
{
	if (old == new)
		return csum;
	return ~csum_fold((__u64)(__u16)~csum + (__u16)~old + new);
}

/* As checksum::update32. */
static __always_inline __u16 csum_upd32(__u16 csum, __u32 old, __u32 new)
{
	if (old == new)
		return csum;
	return ~csum_fold((__u64)(__u16)~csum + (__u16)~(old >> 16) + (__u16)~(old & 0xffff) +
			  (new >> 16) + (new & 0xffff));
}

/* As checksum::update_bytes for a 16-byte field; old/new are the field's
 * bytes as four big-endian words. */
static __always_inline __u16 csum_upd128(__u16 csum, const __u32 *old, const __u32 *new)
{
	if (old[0] == new[0] && old[1] == new[1] && old[2] == new[2] && old[3] == new[3])
		return csum;
	__u16 neg_old = ~csum_fold((__u64)old[0] + old[1] + old[2] + old[3]);
	return ~csum_fold((__u64)(__u16)~csum + neg_old + new[0] + new[1] + new[2] + new[3]);
}

static __always_inline int is_vlan_tpid(__u16 t)
{
	return t == 0x8100 || t == 0x88a8;
}

/* ---- parser ------------------------------------------------------------- */
#define RD32(x) (*(volatile __u32 *)&(x))

/* The transport header at `off` (seglen bytes of IP payload), validated as
 * nicflow_packet::parse::parse_l4 does. */
static __always_inline int parse_l4(struct xdp_md *ctx, union dp_key *key, struct dp_scratch *st,
				    __u8 proto, __u32 off, __u32 seglen, int v6, int is_frag)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u8 *l4;
	__u32 n;

	if (off > DP_MAX_L4_OFF)
		return -1;
	l4 = data + off;
	switch (proto) {
	case 6:
		if (seglen < 20 || l4 + 20 > end)
			return -1;
		n = (l4[12] >> 4) * 4;
		if (n < 20 || n > seglen)
			return -1;
		st->l4 = DP_L4_TCP;
		key->f.tp_src = rd16(l4);
		key->f.tp_dst = rd16(l4 + 2);
		key->f.tcp_flags = rd16(l4 + 12) & 0x0fff;
		return 0;
	case 17:
		if (seglen < 8 || l4 + 8 > end)
			return -1;
		n = rd16(l4 + 4);
		if (n < 8 || (!is_frag && n > seglen))
			return -1;
		st->l4 = DP_L4_UDP;
		key->f.tp_src = rd16(l4);
		key->f.tp_dst = rd16(l4 + 2);
		return 0;
	case 1:
	case 58:
		if ((proto == 1) == (v6 != 0)) {
			st->l4 = DP_L4_OTHER;	/* ICMP over IPv6 / ICMPv6 over IPv4 */
			return 0;
		}
		if (seglen < 4 || l4 + 4 > end)
			return -1;
		st->l4 = v6 ? DP_L4_ICMPV6 : DP_L4_ICMP;
		key->f.tp_src = l4[0];
		key->f.tp_dst = l4[1];
		return 0;
	case 132:
		if (seglen < 12 || l4 + 12 > end)
			return -1;
		st->l4 = DP_L4_SCTP;
		key->f.tp_src = rd16(l4);
		key->f.tp_dst = rd16(l4 + 2);
		return 0;
	default:
		st->l4 = DP_L4_OTHER;
		return 0;
	}
}

/* Returns 0 when the frame was parsed exactly as nicflow_packet::parse
 * would (and `key`/`st` are filled); -1 when userspace must look at it. */
static __always_inline int parse(struct xdp_md *ctx, union dp_key *key, struct dp_scratch *st,
				 __u32 in_port)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u64 flen = bpf_xdp_get_buff_len(ctx);
	__u32 off = 14;
	__u16 et;

	if (data + 14 > end)
		return -1;
	key->f.in_port = in_port;
	__builtin_memcpy(key->f.dl_dst, data, 6);
	__builtin_memcpy(key->f.dl_src, data + 6, 6);
	et = rd16(data + 12);
	if (is_vlan_tpid(et)) {
		if (data + 18 > end)
			return -1;
		key->f.vlan_tci = rd16(data + 14) | 0x1000;
		et = rd16(data + 16);
		off = 18;
		if (is_vlan_tpid(et)) {
			if (data + 22 > end)
				return -1;
			key->f.vlan_tci2 = rd16(data + 18) | 0x1000;
			et = rd16(data + 20);
			off = 22;
			if (is_vlan_tpid(et))
				return -1;	/* a third tag: a parse error in userspace */
		}
	}
	key->f.dl_type = et < 0x0600 ? 0x05ff : et;
	st->l3_off = off;
	st->l4_off = off;
	st->l3 = DP_L3_OTHER;
	st->l4 = DP_L4_NONE;
	st->later_frag = 0;
	if (et < 0x0600) {
		st->l3 = DP_L3_NONE;
		return 0;
	}

	if (et == 0x0800) {
		__u8 *ip = data + off;
		__u32 ihl, total, ff;

		if (ip + 20 > end)
			return -1;
		if ((ip[0] >> 4) != 4)
			return -1;
		ihl = (ip[0] & 0x0f) * 4;
		if (ihl < 20 || flen < off + ihl)
			return -1;
		total = rd16(ip + 2);
		if (total < ihl || total > flen - off)
			return -1;
		st->l3 = DP_L3_IPV4;
		key->f.nw_tos = ip[1];
		key->f.nw_ttl = ip[8];
		key->f.nw_proto = ip[9];
		key->f.nw_src = rd32(ip + 12);
		key->f.nw_dst = rd32(ip + 16);
		ff = rd16(ip + 6);
		if (ff & 0x3fff)	/* MF or offset */
			key->f.nw_frag |= 1;
		if (ff & 0x1fff) {	/* offset: no L4 header */
			key->f.nw_frag |= 2;
			st->later_frag = 1;
		}
		st->l4_off = off + ihl;
		if (st->later_frag)
			return 0;
		return parse_l4(ctx, key, st, key->f.nw_proto, off + ihl, total - ihl, 0,
				key->f.nw_frag & 1);
	}
	if (et == 0x86dd) {
		__u8 *ip = data + off;
		__u32 plen, w;
		__u8 nh;

		if (ip + 40 > end)
			return -1;
		if ((ip[0] >> 4) != 6)
			return -1;
		plen = rd16(ip + 4);
		if (flen < off + 40 + plen)
			return -1;
		nh = ip[6];
		/* Extension headers (hop-by-hop, routing, fragment, AH, dest
		 * opts): userspace walks them, this program does not. */
		if (nh == 0 || nh == 43 || nh == 44 || nh == 51 || nh == 60)
			return -1;
		st->l3 = DP_L3_IPV6;
		w = rd32(ip);
		key->f.nw_tos = (__u8)(w >> 20);
		key->f.ipv6_label = w & 0x000fffff;
		key->f.nw_ttl = ip[7];
		key->f.nw_proto = nh;
		__builtin_memcpy(key->f.ipv6_src, ip + 8, 16);
		__builtin_memcpy(key->f.ipv6_dst, ip + 24, 16);
		st->l4_off = off + 40;
		if (nh == 59)	/* no next header */
			return 0;
		return parse_l4(ctx, key, st, nh, off + 40, plen, 1, 0);
	}
	if (et == 0x0806 || et == 0x8035) {
		__u8 *arp = data + off;

		if (flen < off + 8 || arp + 8 > end)
			return -1;
		if (!(arp[0] == 0 && arp[1] == 1 && arp[2] == 8 && arp[3] == 0 && arp[4] == 6 &&
		      arp[5] == 4))
			return 0;	/* another ARP format: L3 "other", no fields */
		if (flen < off + 28 || arp + 28 > end)
			return -1;
		st->l3 = DP_L3_ARP;
		if (arp[6] == 0)	/* opcode <= 0xff */
			key->f.nw_proto = arp[7];
		__builtin_memcpy(key->f.arp_sha, arp + 8, 6);
		key->f.nw_src = rd32(arp + 14);
		__builtin_memcpy(key->f.arp_tha, arp + 18, 6);
		key->f.nw_dst = rd32(arp + 24);
		return 0;
	}
	return 0;
}

/* ---- actions -------------------------------------------------------------
 * Each returns 0 to go on with the next action, -1 on an internal error
 * (unreachable for frames the parser accepted; the frame is aborted).
 * They re-derive packet pointers from ctx and re-bound every offset read
 * from the scratch map. */

/* Patch the 16-bit L4 checksum at `c` for a pseudo-header / covered field
 * change, honouring UDP's "0 = no checksum" rule (rewrite::patch_csum). */
static __always_inline void patch_l4_32(__u8 *c, int udp, __u32 old, __u32 new)
{
	__u16 o = rd16(c), n;

	if (udp && o == 0)
		return;
	n = csum_upd32(o, old, new);
	if (udp && n == 0)
		n = 0xffff;
	wr16(c, n);
}

static __always_inline void patch_l4_16(__u8 *c, int udp, __u16 old, __u16 new)
{
	__u16 o = rd16(c), n;

	if (udp && o == 0)
		return;
	n = csum_upd16(o, old, new);
	if (udp && n == 0)
		n = 0xffff;
	wr16(c, n);
}

static __always_inline void patch_l4_128(__u8 *c, int udp, const __u32 *old, const __u32 *new)
{
	__u16 o = rd16(c), n;

	if (udp && o == 0)
		return;
	n = csum_upd128(o, old, new);
	if (udp && n == 0)
		n = 0xffff;
	wr16(c, n);
}

/* Pointer to the L4 checksum covering the pseudo header, or NULL if there
 * is none to patch (rewrite::pseudo_l4_csum); *udp set for UDP. *err set
 * when the header is not where the parser said (internal error). */
static __always_inline __u8 *pseudo_csum(struct xdp_md *ctx, struct dp_scratch *st, int *udp,
					 int *err)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u32 l4 = RD32(st->l4_off), kind = RD32(st->l4), l3 = RD32(st->l3);
	__u8 *p;

	*udp = 0;
	if (RD32(st->later_frag))
		return 0;
	if (l4 > DP_MAX_L4_OFF) {
		*err = 1;
		return 0;
	}
	p = data + l4;
	if (kind == DP_L4_TCP) {
		if (p + 18 > end) {
			*err = 1;
			return 0;
		}
		return p + 16;
	}
	if (kind == DP_L4_UDP) {
		if (p + 8 > end) {
			*err = 1;
			return 0;
		}
		*udp = 1;
		return p + 6;
	}
	if (kind == DP_L4_ICMPV6 && l3 == DP_L3_IPV6) {
		if (p + 4 > end) {
			*err = 1;
			return 0;
		}
		return p + 2;
	}
	return 0;
}

static __always_inline int act_set_ipv4(struct xdp_md *ctx, struct dp_scratch *st, __u32 field,
					__u32 new)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u32 l3 = RD32(st->l3_off), old;
	int udp, err = 0;
	__u8 *ip, *c;

	if (RD32(st->l3) != DP_L3_IPV4)
		return 0;
	if (l3 > DP_MAX_L3_OFF)
		return -1;
	ip = data + l3;
	if (ip + 20 > end)
		return -1;
	old = rd32(ip + field);
	wr32(ip + field, new);
	wr16(ip + 10, csum_upd32(rd16(ip + 10), old, new));
	c = pseudo_csum(ctx, st, &udp, &err);
	if (err)
		return -1;
	if (c)
		patch_l4_32(c, udp, old, new);
	return 0;
}

static __always_inline int act_set_ipv6(struct xdp_md *ctx, struct dp_scratch *st, __u32 field,
					const __u8 *addr)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u32 l3 = RD32(st->l3_off), old[4], new[4];
	int udp, err = 0, i;
	__u8 *ip, *c;

	if (RD32(st->l3) != DP_L3_IPV6)
		return 0;
	if (l3 > DP_MAX_L3_OFF)
		return -1;
	ip = data + l3;
	if (ip + 40 > end)
		return -1;
#pragma unroll
	for (i = 0; i < 4; i++) {
		old[i] = rd32(ip + field + 4 * i);
		new[i] = rd32(addr + 4 * i);
		wr32(ip + field + 4 * i, new[i]);
	}
	c = pseudo_csum(ctx, st, &udp, &err);
	if (err)
		return -1;
	if (c)
		patch_l4_128(c, udp, old, new);
	return 0;
}

/* Rewrite the 16-bit word at IPv4 header offset `w` to `new` with the
 * header checksum (rewrite::ipv4_set_word). */
static __always_inline void ipv4_set_word(__u8 *ip, __u32 w, __u16 new)
{
	__u16 old = rd16(ip + w);

	wr16(ip + w, new);
	wr16(ip + 10, csum_upd16(rd16(ip + 10), old, new));
}

/* op: DP_OP_SET_TOS, DP_OP_SET_TTL or DP_OP_DEC_TTL. */
static __always_inline int act_ip_byte(struct xdp_md *ctx, struct dp_scratch *st, __u32 op,
				       __u8 v)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u32 l3 = RD32(st->l3_off), kind = RD32(st->l3);
	__u8 *ip;

	if (kind != DP_L3_IPV4 && kind != DP_L3_IPV6)
		return 0;
	if (l3 > DP_MAX_L3_OFF)
		return -1;
	ip = data + l3;
	if (kind == DP_L3_IPV4) {
		if (ip + 20 > end)
			return -1;
		if (op == DP_OP_SET_TOS) {
			ipv4_set_word(ip, 0, ((__u16)ip[0] << 8) | v);
			return 0;
		}
		if (op == DP_OP_DEC_TTL) {
			if (ip[8] <= 1)
				return -1;	/* pre-checked before any write */
			v = ip[8] - 1;
		}
		ipv4_set_word(ip, 8, ((__u16)v << 8) | ip[9]);
		return 0;
	}
	if (ip + 40 > end)
		return -1;
	if (op == DP_OP_SET_TOS) {
		ip[0] = (ip[0] & 0xf0) | (v >> 4);
		ip[1] = (ip[1] & 0x0f) | (__u8)(v << 4);
		return 0;
	}
	if (op == DP_OP_DEC_TTL) {
		if (ip[7] <= 1)
			return -1;
		v = ip[7] - 1;
	}
	ip[7] = v;
	return 0;
}

static __always_inline int act_set_tp(struct xdp_md *ctx, struct dp_scratch *st, __u32 field,
				      __u16 port)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u32 l4 = RD32(st->l4_off), kind = RD32(st->l4), l3 = RD32(st->l3);
	__u16 old;
	__u8 *p;

	if (l3 != DP_L3_IPV4 && l3 != DP_L3_IPV6)
		return 0;
	if (kind != DP_L4_TCP && kind != DP_L4_UDP)
		return 0;	/* SCTP never gets here: pre-checked */
	if (l4 > DP_MAX_L4_OFF)
		return -1;
	p = data + l4;
	if (kind == DP_L4_TCP) {
		if (p + 20 > end)
			return -1;
		old = rd16(p + field);
		wr16(p + field, port);
		patch_l4_16(p + 16, 0, old, port);
		return 0;
	}
	if (p + 8 > end)
		return -1;
	old = rd16(p + field);
	wr16(p + field, port);
	patch_l4_16(p + 6, 1, old, port);
	return 0;
}

static __always_inline int act_set_arp(struct xdp_md *ctx, struct dp_scratch *st,
				       struct dp_action *a)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u32 l3 = RD32(st->l3_off);
	__u8 *arp;

	if (RD32(st->l3) != DP_L3_ARP)
		return 0;
	if (l3 > DP_MAX_L3_OFF)
		return -1;
	arp = data + l3;
	if (arp + 28 > end)
		return -1;
	switch (a->op) {
	case DP_OP_SET_ARP_SPA:
		wr32(arp + 14, a->arg32);
		break;
	case DP_OP_SET_ARP_TPA:
		wr32(arp + 24, a->arg32);
		break;
	case DP_OP_SET_ARP_SHA:
		__builtin_memcpy(arp + 8, a->data, 6);
		break;
	default:
		__builtin_memcpy(arp + 18, a->data, 6);
		break;
	}
	return 0;
}

static __always_inline int act_push_vlan(struct xdp_md *ctx, struct dp_scratch *st, __u16 tpid,
					 __u16 tci)
{
	__u8 *data, *end;
	__u8 mac[12];

	if (bpf_xdp_adjust_head(ctx, -4))
		return -1;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + 18 > end)
		return -1;
	__builtin_memcpy(mac, data + 4, 12);
	__builtin_memcpy(data, mac, 12);
	wr16(data + 12, tpid);
	wr16(data + 14, tci);
	RD32(st->l3_off) = RD32(st->l3_off) + 4;
	RD32(st->l4_off) = RD32(st->l4_off) + 4;
	return 0;
}

static __always_inline int act_pop_vlan(struct xdp_md *ctx, struct dp_scratch *st)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u8 mac[12];

	if (data + 14 > end)
		return -1;
	if (!is_vlan_tpid(rd16(data + 12)))
		return 0;	/* untagged: a no-op, as rewrite::pop_vlan */
	if (data + 18 > end)
		return -1;
	__builtin_memcpy(mac, data, 12);
	__builtin_memcpy(data + 4, mac, 12);
	if (bpf_xdp_adjust_head(ctx, 4))
		return -1;
	RD32(st->l3_off) = RD32(st->l3_off) - 4;
	RD32(st->l4_off) = RD32(st->l4_off) - 4;
	return 0;
}

static __always_inline int act_set_vlan_tci(struct xdp_md *ctx, __u16 tci)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;

	if (data + 16 > end)
		return -1;
	if (!is_vlan_tpid(rd16(data + 12)))
		return 0;
	/* VID and PCP from the flow, DEI kept (execute.rs SetVlanTci). */
	wr16(data + 14, (rd16(data + 14) & 0x1000) | (tci & 0xefff));
	return 0;
}

static __always_inline int act_set_eth(struct xdp_md *ctx, __u32 at, const __u8 *mac)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;

	if (data + 12 > end)
		return -1;
	if (at == 0)
		__builtin_memcpy(data, mac, 6);
	else
		__builtin_memcpy(data + 6, mac, 6);
	return 0;
}

/* ---- tunnels: decap, entropy, encap ------------------------------------- */

/* An IPv4 header's checksum field value for the 20 bytes at ip (field
 * itself counted as zero when `skip` is set), as checksum::checksum. */
static __always_inline __u16 ipv4_hdr_csum(const __u8 *ip, int skip)
{
	__u64 s = 0;
	int i;

#pragma unroll
	for (i = 0; i < 20; i += 2) {
		if (skip && i == 10)
			continue;
		s += rd16(ip + i);
	}
	return ~csum_fold(s);
}

/* Sum `n` bytes (a constant multiple of 4) at data + *off into *sum and
 * advance, if at least n are left. 0, or -1 when the packet is shorter
 * than the lengths said (to userspace). */
static __always_inline int csum_step(struct xdp_md *ctx, __u32 *off, __u32 *left, __s64 *sum,
				     __u32 n)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u32 o = *off;
	__u8 *p;

	if (*left < n)
		return 0;
	asm volatile("" : "+r"(o));
	if (o > 2048)
		return -1;
	p = data + o;
	if (p + n > end)
		return -1;
	*sum = bpf_csum_diff(0, 0, (__be32 *)p, n, (__u32)*sum);
	if (*sum < 0)
		return -1;
	*off = o + n;
	*left -= n;
	return 0;
}

/* The outer UDP checksum of a linear IPv4 tunnel packet (UDP at offset
 * 34, `ulen` bytes to the end of the frame) is right: the one's-complement
 * sum of the pseudo header and the datagram is 0xffff, the test
 * checksum::l4_checksum_ipv4 makes in userspace. The datagram is summed
 * with bpf_csum_diff in constant-size chunks (512 bytes at most per call),
 * the last 0-3 bytes zero-padded on the stack. */
static __always_inline int udp4_csum_ok(struct xdp_md *ctx, __u32 src, __u32 dst, __u32 ulen)
{
	__u8 pseudo[12], tail[4] = {};
	__u32 off = 34, left = ulen, i;
	__s64 sum;

	/* Jumbo: userspace. A multi-buffer frame fails a chunk's bounds
	 * check (the sum covers exactly ulen bytes of the linear part). */
	if (ulen > 1536 + 508)
		return 0;
	wr32(pseudo, src);
	wr32(pseudo + 4, dst);
	pseudo[8] = 0;
	pseudo[9] = 17;
	wr16(pseudo + 10, ulen);
	sum = bpf_csum_diff(0, 0, (__be32 *)pseudo, 12, 0);
	if (sum < 0)
		return 0;
#pragma unroll
	for (i = 0; i < 3; i++) {
		if (csum_step(ctx, &off, &left, &sum, 512))
			return 0;
	}
	if (csum_step(ctx, &off, &left, &sum, 256) || csum_step(ctx, &off, &left, &sum, 128) ||
	    csum_step(ctx, &off, &left, &sum, 64) || csum_step(ctx, &off, &left, &sum, 32) ||
	    csum_step(ctx, &off, &left, &sum, 16) || csum_step(ctx, &off, &left, &sum, 8) ||
	    csum_step(ctx, &off, &left, &sum, 4))
		return 0;
	if (left >= 4)
		return 0;
	if (left && bpf_xdp_load_bytes(ctx, off, tail, left))
		return 0;
	sum = bpf_csum_diff(0, 0, (__be32 *)tail, 4, (__u32)sum);
	if (sum < 0)
		return 0;
	return csum_fold((__u64)sum) == 0xffff;
}

/* A frame on an underlay: if it is a well-formed tunnel packet for one of
 * dp_tun_rx's endpoints that userspace would accept exactly as here, fill
 * the key's tunnel fields, return the tunnel port and *kind; otherwise -1
 * (userspace decides and counts). Nothing is written to the frame. */
static __always_inline int tun_rx_lookup(struct xdp_md *ctx, struct dp_port *port,
					 union dp_key *key)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u64 flen = bpf_xdp_get_buff_len(ctx);
	struct dp_tun_rx_key k = {};
	struct dp_tun_rx *ep;
	__u8 *ip, *udp, *t;
	__u16 flags = 8;	/* TUN_F_KEY */
	__u32 vni;
	int i;

	if (data + DP_TUN_HDR_LEN + 14 > end)
		return -1;
	/* Outer destination is the underlay (broadcasts and anything else:
	 * userspace), not from the underlay itself. */
	{
		int same_src = 1;

#pragma unroll
		for (i = 0; i < 6; i++) {
			if (data[i] != port->mac[i])
				return -1;
			if (data[6 + i] != port->mac[i])
				same_src = 0;
		}
		if (same_src)
			return -1;
	}
	if (rd16(data + 12) != 0x0800)
		return -1;
	ip = data + 14;
	/* No options, UDP, not a fragment, header checksum right. */
	if (ip[0] != 0x45 || ip[9] != 17 || (rd16(ip + 6) & 0x3fff))
		return -1;
	if (ipv4_hdr_csum(ip, 0) != 0)
		return -1;
	if (rd16(ip + 2) != flen - 14)
		return -1;	/* trailing bytes or truncated: userspace */
	if (flen - 14 > port->mtu)
		return -1;	/* the AF_XDP port's length rule, in userspace */
	udp = ip + 20;
	if (rd16(udp + 4) != flen - 34)
		return -1;
	t = udp + 8;
	vni = ((__u32)t[4] << 16) | ((__u32)t[5] << 8) | t[6];
	k.ifindex = ctx->ingress_ifindex;
	k.local = rd32(ip + 16);
	k.remote = rd32(ip + 12);
	k.dst_port = rd16(udp + 2);
	k.vni = vni;
	ep = bpf_map_lookup_elem(&dp_tun_rx, &k);
	if (!ep) {
		k.vni = DP_VNI_ANY;
		ep = bpf_map_lookup_elem(&dp_tun_rx, &k);
		if (!ep)
			return -1;
	}
	if (ep->kind == DP_TUN_VXLAN) {
		if (!(t[0] & 0x08))
			return -1;	/* no I flag: userspace counts it */
	} else {
		/* Version 0, no options (userspace walks them), Ethernet
		 * payload, no critical bit. */
		if (t[0] != 0 || (t[1] & 0x40) || rd16(t + 2) != 0x6558)
			return -1;
		if (t[1] & 0x80)
			flags |= 1;	/* TUN_F_OAM */
	}
	/* Checked after the endpoint lookup so that no other host's
	 * traffic costs a pass over the frame. */
	if (rd16(udp + 6) != 0) {
		if (!udp4_csum_ok(ctx, k.remote, k.local, flen - 34))
			return -1;	/* bad or not checkable here: userspace */
		flags |= 4;	/* TUN_F_CSUM */
	}
	key->f.tun_id = vni;
	key->f.tun_src = k.remote;
	key->f.tun_dst = k.local;
	key->f.tun_flags = flags;
	return ep->in_port;
}

/* FNV-1a over n bytes at p (n a constant), as tunnel::Fnv1a. */
#define FNV_PRIME 0x00000100000001b3ULL
static __always_inline __u64 fnv(__u64 h, const __u8 *p, int n)
{
	int i;

#pragma unroll
	for (i = 0; i < n; i++)
		h = (h ^ p[i]) * FNV_PRIME;
	return h;
}

/* nicflow_packet::tunnel::entropy_port of the frame as it is now (after
 * the flow's rewrites): Ethernet addresses, EtherType, IP addresses,
 * protocol, and the L4 ports of unfragmented TCP/UDP/SCTP. 0 on an
 * internal error. */
static __always_inline __u16 entropy_port(struct xdp_md *ctx, struct dp_scratch *st,
					  union dp_key *key)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u32 l3 = RD32(st->l3_off), l4 = RD32(st->l4_off), kind = RD32(st->l3);
	__u32 l4k = RD32(st->l4), et_off;
	__u64 h = 0xcbf29ce484222325ULL;
	__u8 *p;

	if (l3 < 14 || l3 > DP_MAX_L3_OFF || l4 > DP_MAX_L4_OFF)
		return 0;
	if (data + 14 > end)
		return 0;
	h = fnv(h, data, 12);
	/* The EtherType before L3 (the innermost tag's); an opaque offset
	 * so the compiler cannot turn it into a negative packet offset. */
	et_off = l3 - 2;
	asm volatile("" : "+r"(et_off));
	if (et_off > DP_MAX_L3_OFF)
		return 0;
	p = data + et_off;
	if (p + 2 > end)
		return 0;
	h = fnv(h, p, 2);
	if (kind == DP_L3_IPV4) {
		p = data + l3 + 12;
		if (p + 8 > end)
			return 0;
		h = fnv(h, p, 8);
	} else if (kind == DP_L3_IPV6) {
		p = data + l3 + 8;
		if (p + 32 > end)
			return 0;
		h = fnv(h, p, 32);
	}
	if (kind == DP_L3_IPV4 || kind == DP_L3_IPV6) {
		h = (h ^ key->f.nw_proto) * FNV_PRIME;
		if ((l4k == DP_L4_TCP || l4k == DP_L4_UDP || l4k == DP_L4_SCTP) &&
		    !(key->f.nw_frag & 1)) {
			p = data + l4;
			if (p + 4 > end)
				return 0;
			h = fnv(h, p, 4);
		}
	}
	/* MurmurHash3 fmix64, then the top 14 bits into 49152..65535. */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return 49152 + (__u16)(h >> 50);
}

/* Push the tunnel's outer header and redirect to its underlay. The flow's
 * pre-check made sure the header is resolved, the underlay slot is there
 * and the frame fits. */
static __always_inline int act_tunnel_output(struct xdp_md *ctx, struct dp_scratch *st,
					     union dp_key *key, struct dp_action *a)
{
	/* The header the pre-check copied (the same slot: the encoder writes
	 * it to both places). */
	struct dp_tun_copy *tpl = &st->tun;
	__u32 vni, ip_len;
	__u8 *data, *end, *ip, *udp;
	__u16 sport;

	if (!tpl->valid)
		return -1;
	sport = entropy_port(ctx, st, key);
	if (!sport)
		return -1;
	if (a->arg16 == DP_TUN_VNI_ACTION)
		vni = *(__u32 *)a->data;
	else if (a->arg16 == DP_TUN_VNI_KEY)
		vni = (__u32)key->f.tun_id;
	else
		vni = ((__u32)tpl->hdr[46] << 16) | ((__u32)tpl->hdr[47] << 8) | tpl->hdr[48];
	vni &= 0xffffff;
	if (bpf_xdp_adjust_head(ctx, -DP_TUN_HDR_LEN))
		return -1;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + DP_TUN_HDR_LEN > end)
		return -1;
	__builtin_memcpy(data, tpl->hdr, DP_TUN_HDR_LEN);
	ip_len = bpf_xdp_get_buff_len(ctx) - 14;
	ip = data + 14;
	udp = ip + 20;
	wr16(ip + 2, ip_len);
	wr16(ip + 10, 0);
	wr16(ip + 10, ipv4_hdr_csum(ip, 1));
	wr16(udp, sport);
	wr16(udp + 4, ip_len - 20);
	udp[12] = vni >> 16;
	udp[13] = vni >> 8;
	udp[14] = vni;
	stat_inc(DP_STAT_ENCAP);
	stat_inc(DP_STAT_OUTPUT);
	return bpf_redirect_map(&dp_tx_ports, tpl->tx_slot, 0);
}

/* ---- the program ---------------------------------------------------------- */
SEC("xdp.frags")
int xdp_dp(struct xdp_md *ctx)
{
	__u32 zero = 0, ifindex = ctx->ingress_ifindex, i, n, in_port;
	int decapped = 0;
	union dp_key *key;
	struct dp_flow_key *hk;
	struct dp_flow *flow = 0;
	struct dp_tun_tx *tpl;
	struct dp_scratch *st;
	struct dp_config *cfg;
	struct dp_port *port;
	__u8 flags;

	stat_inc(DP_STAT_RX);
	port = bpf_map_lookup_elem(&dp_ports, &ifindex);
	if (!port) {
		/* Not a port of ours (yet): the host stack's, never another
		 * interface's socket. */
		stat_inc(DP_STAT_NO_PORT);
		return XDP_PASS;
	}
	st = bpf_map_lookup_elem(&dp_scratch, &zero);
	cfg = bpf_map_lookup_elem(&dp_config, &zero);
	if (!st || !cfg)
		goto to_user;
	key = &st->key;
	hk = &st->hk;
	__builtin_memset(key, 0, sizeof(*key));
	hk->pad = 0;
	in_port = port->in_port;
	if (port->flags & DP_PORT_UNDERLAY) {
		int tp = tun_rx_lookup(ctx, port, key);

		if (tp < 0) {
			/* ARP, other hosts' traffic, malformed or unknown
			 * tunnel packets: the underlay's userspace side. */
			stat_inc(DP_STAT_UNPARSED);
			goto to_user;
		}
		/* Strip the outer headers; on a miss they go back on
		 * (adjust_head only moves the start, the bytes stay). */
		if (bpf_xdp_adjust_head(ctx, DP_TUN_HDR_LEN))
			goto to_user;
		decapped = 1;
		stat_inc(DP_STAT_DECAP);
		in_port = tp;
	}
	if (parse(ctx, key, st, in_port) < 0) {
		stat_inc(DP_STAT_UNPARSED);
		goto to_user;
	}

	/* Masked lookup, mask slots in order; the first hit wins (the slow
	 * path's megaflows do not overlap for a given packet). */
	n = cfg->n_masks;
#pragma clang loop unroll(disable)
	for (i = 0; i < DP_MAX_MASKS_CAP; i++) {
		struct dp_mask *m;
		__u32 idx = i;
		int w;

		if (i >= n)
			break;
		m = bpf_map_lookup_elem(&dp_masks, &idx);
		if (!m)
			break;
		if (!m->active)
			continue;
		hk->mask_idx = i;
#pragma unroll
		for (w = 0; w < DP_KEY_WORDS; w++)
			hk->key.w[w] = key->w[w] & m->mask.w[w];
		flow = bpf_map_lookup_elem(&dp_flows, hk);
		if (flow)
			break;
	}
	if (!flow) {
		stat_inc(DP_STAT_MISS);
		goto to_user;
	}

	/* Pre-checks: anything that would keep the kernel from finishing the
	 * actions exactly as userspace would sends the untouched frame up. */
	flags = flow->flags;
	if ((flags & DP_F_DEC_TTL) && (RD32(st->l3) == DP_L3_IPV4 || RD32(st->l3) == DP_L3_IPV6) &&
	    key->f.nw_ttl <= 1)
		goto punt;
	if ((flags & DP_F_SET_TP) && RD32(st->l4) == DP_L4_SCTP)
		goto punt;
	if (flags & DP_F_OUTPUT) {
		__u32 slot = flow->out_slot;

		if (!bpf_map_lookup_elem(&dp_tx_ports, &slot))
			goto punt;
	}
	if (flags & DP_F_TUNNEL) {
		__u32 slot = flow->out_slot;

		tpl = bpf_map_lookup_elem(&dp_tun_tx, &slot);
		if (!tpl)
			goto punt;
		bpf_spin_lock(&tpl->lock);
		st->tun.valid = tpl->valid;
		st->tun.tx_slot = tpl->tx_slot;
		st->tun.inner_mtu = tpl->inner_mtu;
		__builtin_memcpy(st->tun.hdr, tpl->hdr, DP_TUN_HDR_LEN);
		bpf_spin_unlock(&tpl->lock);
		if (!st->tun.valid)
			goto punt;	/* remote MAC not resolved (yet) */
		slot = st->tun.tx_slot;
		if (!bpf_map_lookup_elem(&dp_tx_ports, &slot))
			goto punt;
		/* Too big for the tunnel: userspace answers with ICMP or
		 * drops and counts (VLAN pushes are refused by the encoder,
		 * so the frame cannot grow). */
		if (bpf_xdp_get_buff_len(ctx) - 14 > st->tun.inner_mtu)
			goto punt;
	}

	stat_inc(DP_STAT_HIT);
	if (!(cfg->flags & DP_CFG_NO_COUNTERS)) {
		__sync_fetch_and_add(&flow->packets, 1);
		__sync_fetch_and_add(&flow->bytes, bpf_xdp_get_buff_len(ctx));
	}
	flow->used_ns = bpf_ktime_get_ns();
	if (key->f.tcp_flags & ~flow->tcp_flags)
		flow->tcp_flags |= key->f.tcp_flags;

#pragma clang loop unroll(disable)
	for (i = 0; i < DP_MAX_ACTIONS; i++) {
		struct dp_action *a;
		int r = 0;

		if (i >= flow->n_actions)
			break;
		a = &flow->actions[i];
		switch (a->op) {
		case DP_OP_OUTPUT:
			stat_inc(DP_STAT_OUTPUT);
			return bpf_redirect_map(&dp_tx_ports, a->arg32, 0);
		case DP_OP_DROP:
			stat_inc(DP_STAT_DROP);
			stat_inc(DP_STAT_DROP_REASON +
				 (a->arg16 < DP_DROP_REASONS ? a->arg16 : DP_DROP_REASONS - 1));
			return XDP_DROP;
		case DP_OP_TUNNEL_OUTPUT:
			r = act_tunnel_output(ctx, st, key, a);
			if (r >= 0)
				return r;
			break;
		case DP_OP_SET_ETH_SRC:
			r = act_set_eth(ctx, 6, a->data);
			break;
		case DP_OP_SET_ETH_DST:
			r = act_set_eth(ctx, 0, a->data);
			break;
		case DP_OP_SET_IPV4_SRC:
			r = act_set_ipv4(ctx, st, 12, a->arg32);
			break;
		case DP_OP_SET_IPV4_DST:
			r = act_set_ipv4(ctx, st, 16, a->arg32);
			break;
		case DP_OP_SET_IPV6_SRC:
			r = act_set_ipv6(ctx, st, 8, a->data);
			break;
		case DP_OP_SET_IPV6_DST:
			r = act_set_ipv6(ctx, st, 24, a->data);
			break;
		case DP_OP_SET_TOS:
		case DP_OP_SET_TTL:
		case DP_OP_DEC_TTL:
			r = act_ip_byte(ctx, st, a->op, (__u8)a->arg16);
			break;
		case DP_OP_SET_TP_SRC:
			r = act_set_tp(ctx, st, 0, a->arg16);
			break;
		case DP_OP_SET_TP_DST:
			r = act_set_tp(ctx, st, 2, a->arg16);
			break;
		case DP_OP_PUSH_VLAN:
			r = act_push_vlan(ctx, st, (__u16)a->arg32, a->arg16);
			break;
		case DP_OP_POP_VLAN:
			r = act_pop_vlan(ctx, st);
			break;
		case DP_OP_SET_VLAN_TCI:
			r = act_set_vlan_tci(ctx, a->arg16);
			break;
		case DP_OP_SET_ARP_SPA:
		case DP_OP_SET_ARP_TPA:
		case DP_OP_SET_ARP_SHA:
		case DP_OP_SET_ARP_THA:
			r = act_set_arp(ctx, st, a);
			break;
		default:
			r = -1;
			break;
		}
		if (r < 0) {
			stat_inc(DP_STAT_ABORTED);
			return XDP_ABORTED;
		}
	}
	/* No output: the frame ends here, as the userspace leftover buffer.
	 * Only an empty action list is a drop by policy there. */
	stat_inc(DP_STAT_DROP);
	if (flow->n_actions == 0)
		stat_inc(DP_STAT_DROP_POLICY);
	return XDP_DROP;

punt:
	stat_inc(DP_STAT_PUNT);
to_user:
	if (decapped && bpf_xdp_adjust_head(ctx, -DP_TUN_HDR_LEN))
		return XDP_ABORTED;
	return bpf_redirect_map(&dp_xsks, port->xsk_base + ctx->rx_queue_index, XDP_PASS);
}

/* GPL for the GPL-only helpers (the file is Apache-2.0 OR GPL-2.0-only). */
char _license[] SEC("license") = "GPL";
