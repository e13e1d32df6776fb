// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * dp_core.h: the kernel datapath shared by nicflow's two eBPF attach
 * points, xdp_dp.c (XDP, on AF_XDP ports) and tc_dp.c (TC ingress, on
 * plain interfaces). Everything that decides what a frame is and what
 * happens to it lives here: the key (same meaning as
 * nicflow_flow::FlowKey), the maps every engine shares (flows, masks,
 * config, ports, tunnels, stats), the parser, and the header rewrites.
 * dp_exec.h adds the masked lookup and the action loop. What differs per
 * attach point is only I/O: how a frame leaves (devmap redirect vs
 * bpf_redirect / bpf_redirect_peer), where a miss goes (AF_XDP socket vs
 * the port's upcall device), how VLAN tags and head room are moved, and
 * how checksums are folded (TC keeps the skb's CHECKSUM_PARTIAL /
 * COMPLETE state right through kernel helpers).
 *
 * The including file defines first:
 *   DP_CTX        struct xdp_md or struct __sk_buff
 *   CTX_DATA_OFF, CTX_DATA_END_OFF   offsets of its data/data_end fields
 *   dp_len(ctx)   the frame's full length (multi-buffer / nonlinear)
 *   DP_TC         (TC only) checksum-state-aware rewrites
 *
 * Layouts are mirrored in crates/nicflow/src/offload/kernel/layout.rs and
 * checked at compile time against the constants build.rs reads from here.
 */
#include <linux/bpf.h>
#include <bpf/bpf_endian.h>

/* Packet pointers, each loaded with one instruction from the unmodified
 * context register. Written as C (`ctx->data_end`), clang may keep the
 * field's address (ctx + 80) in a register or a stack slot across a helper
 * call and load through it later, which the verifier refuses ("dereference
 * of modified ctx ptr"). */
#define DP_STR2(x) #x
#define DP_STR(x) DP_STR2(x)
#define dp_ctx_u32(ctx, off)                                                   \
	({                                                                     \
		unsigned long __v; /* 64-bit: no zero-extension after it */     \
		asm volatile("%0 = *(u32 *)(%1 + " DP_STR(off) ")"             \
			     : "=r"(__v)                                       \
			     : "r"(ctx));                                      \
		__v;                                                           \
	})
#define DP_DATA(ctx) ((__u8 *)dp_ctx_u32(ctx, CTX_DATA_OFF))
#define DP_DATA_END(ctx) ((__u8 *)dp_ctx_u32(ctx, CTX_DATA_END_OFF))
#include <bpf/bpf_helpers.h>

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/* Upper bound of the mask loop; the map's real size is set at load time
 * (EbpfLoader::set_max_entries("dp_masks", n), n <= this). */
#define DP_MAX_MASKS_CAP 64
/* Actions per flow. Mirrored by offload::kernel::layout::MAX_ACTIONS. */
#define DP_MAX_ACTIONS 16
/* Deepest L3 offset handled: Ethernet + 2 tags parsed + pushes. */
#define DP_MAX_L3_OFF 128
/* Deepest L4 offset handled: L3 offset + 60 bytes of IPv4 header / 40 IPv6. */
#define DP_MAX_L4_OFF (DP_MAX_L3_OFF + 60)

/* ---- the key: same semantics as nicflow_flow::FlowKey (key.rs) -------- */
/* Integers in host order, MACs and IPv6 addresses as network-order bytes,
 * vlan_tci with 0x1000 = "tag present", ICMP type/code in tp_src/tp_dst,
 * ARP opcode (<= 0xff) in nw_proto and ARP IPs in nw_src/nw_dst. 112 bytes,
 * no padding: the layout is mirrored by offload::kernel::layout::DpKey. */
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
	__u16 tun_pad;		/* 106, always 0 */
	/* tun_metadata0: the value of the Geneve option the tunnel port's TLV
	 * map names slot 0 (TC only; 0 when absent). The only option slot in
	 * the key: OVN uses one, and slot 0 fits the word tun_flags leaves
	 * (flows matching tun_metadata1..7 stay in userspace). */
	__u32 tun_md0;		/* 108 */
};

#define DP_KEY_WORDS 14
union dp_key {
	struct dp_key_fields f;
	__u64 w[DP_KEY_WORDS];
};
_Static_assert(sizeof(struct dp_key_fields) == 112, "dp_key layout");
_Static_assert(sizeof(union dp_key) == 112, "dp_key layout");

/* dp_flows key: the slot of the flow's mask and a 64-bit hash of the key
 * masked by it (dp_key_hash). The kernel's hash table hashes and compares
 * these 16 bytes instead of a 120-byte masked key: that was half of a hit's
 * cost. Two masked keys with the same hash cannot both be installed
 * (userspace refuses the second: it stays in userspace), and a hit is
 * verified against the masked key the flow stores (dp_flow.key), so a
 * frame whose masked key merely hashes alike misses. */
struct dp_flow_key {
	__u32 mask_idx;
	__u32 pad;	/* 0; 1 + b: bucket b of a select flow (DP_F_SELECT) */
	__u64 hash;
};
_Static_assert(sizeof(struct dp_flow_key) == 16, "dp_flow_key layout");

/* dp_masks value. active = 0: free slot, skipped. */
struct dp_mask {
	__u32 active;
	__u32 pad;
	union dp_key mask;
};
_Static_assert(sizeof(struct dp_mask) == 120, "dp_mask layout");

/* The flow hash: the sum over the non-zero words of the masked key of a
 * bijective mix of each word xored with its own random seed
 * (dp_config.seed[w], per engine), the words' mixes independent of each
 * other. Zero words are skipped (they add nothing): a megaflow's mask
 * leaves most words out (a learning switch's: 2 of 14), and mixing each
 * was most of the hash's cost (issue 33). The mix is a full one (xorshift, multiply,
 * xorshift, multiply, xorshift): with a single multiply, a difference in
 * a word's top bit stays a fixed difference whatever the seed, and two
 * such words cancel in the sum, which a sender could aim at. Mirrored by
 * offload::kernel::layout::key_hash. */
#define DP_HASH_MUL 0x9e3779b97f4a7c15ULL
#define DP_HASH_MUL2 0xbf58476d1ce4e5b9ULL
static __always_inline __u64 dp_hash_word(__u64 v, __u64 seed)
{
	v ^= seed;
	v ^= v >> 32;
	v *= DP_HASH_MUL;
	v ^= v >> 29;
	v *= DP_HASH_MUL2;
	return v ^ (v >> 32);
}

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
	/* Run the frame through dp_meters[arg32] (a rule's meter:N); only as
	 * the first action, which is where OpenFlow puts a meter. */
	DP_OP_METER = 22,
	/* Geneve option bytes for the TUNNEL_OUTPUT that follows (TC): data
	 * holds 16 bytes of the options block userspace built from the
	 * tunnel's TLV map; chunk arg16 of them. A no-op in the loop. */
	DP_OP_TUN_OPTS = 23,
	/* A per-packet select group (dp_exec.h dp_select_pick): arg32 = its
	 * dp_select slot, arg16 = method (DP_SEL_*) | buckets << 8. A select
	 * flow's only action; each bucket's actions are a flow of their own
	 * (dp_select_bucket). Never run by the action loop. */
	DP_OP_SELECT = 24,
};

/* Where DP_OP_TUNNEL_OUTPUT takes the VNI from. */
#define DP_TUN_VNI_TEMPLATE	0	/* the port's fixed key (in the template) */
#define DP_TUN_VNI_ACTION	1	/* data[0..4], host order: set_tunnel */
#define DP_TUN_VNI_KEY		2	/* the frame's tun_id (0 if not from a tunnel) */
/* TUNNEL_OUTPUT data[4]: Geneve option bytes pushed (a multiple of 4, at
 * most DP_GENEVE_OPT_MAX, in the TUN_OPTS actions right before it);
 * data[5]: 0x40 when one of them is critical (the header's C bit). */
#define DP_TUN_OPT_LEN_AT	4
#define DP_TUN_OPT_CRIT_AT	5

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
#define DP_F_SET_TP	0x02	/* has SET_TP_*: SCTP or ICMP frame -> userspace */
#define DP_F_OUTPUT	0x04	/* has OUTPUT to out_slot: empty slot -> userspace */
#define DP_F_TUNNEL	0x08	/* has TUNNEL_OUTPUT via dp_tun_tx[out_slot]: no
				 * resolved header, no underlay slot or an
				 * inner frame over the tunnel's MTU -> userspace */
#define DP_F_SELECT	0x10	/* a select flow: its frames run the chosen
				 * bucket's flow (dp_select_bucket) */

/* dp_flows value: counters (updated here with atomic adds, read by
 * userspace) then the action list. */
struct dp_flow {
	__u64 packets;
	__u64 bytes;
	__u64 used_ns;		/* bpf_ktime_get_coarse_ns() of the last hit, 0 = never */
	/* tcp_flags (the OR of the TCP flags seen) is ORed in with one atomic
	 * 64-bit OR on tcp_flags_word (the other fields OR with zero; clang's
	 * default BPF CPU has no 32-bit atomics): hits on two CPUs at once
	 * lose no flag (the tracker learns FINs from it). */
	union {
		__u64 tcp_flags_word;
		struct {
			__u16 tcp_flags;
			__u8 n_actions;
			__u8 flags;		/* DP_F_* */
			__u32 out_slot;
		};
	};
	/* The masked key the flow matches (words its mask leaves out are 0):
	 * what a lookup verifies a hash hit against. */
	union dp_key key;
	struct dp_action actions[DP_MAX_ACTIONS];
};
_Static_assert(sizeof(struct dp_flow) == 32 + 112 + 24 * DP_MAX_ACTIONS, "dp_flow layout");

/* TCP flags as they sit in dp_flow.tcp_flags_word (the BPF target has the
 * host's byte order). */
static __always_inline __u64 dp_tcp_flags_word(__u16 f)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return f;
#else
	return (__u64)f << 48;
#endif
}

/* dp_config.flags: per-flow packet/byte counters off (the table-scale
 * experiment's "counters off"; the last-used time is still stored, aging
 * needs it, and it is a plain store rather than two atomic adds). */
#define DP_CFG_NO_COUNTERS 1

struct dp_config {
	__u32 n_masks;	/* slots 0..n_masks-1 are tried */
	__u32 flags;	/* DP_CFG_* */
	__u64 seed[DP_KEY_WORDS];	/* of the flow hash, random per engine */
};

/* dp_port.flags: the interface is a tunnel underlay; frames for one of
 * the dp_tun_rx endpoints are decapsulated here and looked up as received
 * on that endpoint's tunnel port. */
#define DP_PORT_UNDERLAY 1

struct dp_port {
	__u32 in_port;	/* nicflow datapath port number of this interface */
	/* XDP: first dp_xsks slot of this interface: a miss on rx queue q goes to
	 * dp_xsks[xsk_base + q]. One program instance serves every port of a
	 * bridge, and every veth has its single queue 0, so the XSKMAP cannot
	 * be keyed by the queue alone (an AF_XDP socket only accepts frames of
	 * the interface and queue it is bound to; any other is dropped). */
	__u32 xsk_base;
	__u32 flags;	/* DP_PORT_* */
	__u8 mac[6];	/* underlay: the interface's MAC (outer destination) */
	__u16 mtu;	/* underlay: its MTU (longer frames: userspace) */
	/* TC: misses are redirected to this interface's egress (the port's
	 * upcall veth, read by the daemon); 0 = passed to the host stack.
	 * XDP: unused (misses go to dp_xsks). */
	__u32 upcall_ifindex;
};
_Static_assert(sizeof(struct dp_port) == 24, "dp_port layout");

/* ---- tunnels -------------------------------------------------------------
 * Decap (underlay rx): IPv4/UDP/VXLAN or Geneve without options, every
 * check of nicflow_packet::tunnel::parse that can fail done here too (and a
 * frame it cannot decide goes to userspace whole, which decides and counts).
 * Encap: the 50-byte outer header built by userspace with
 * nicflow_packet::tunnel::encap (resolved MACs, addresses, TTL, TOS, DF,
 * UDP port, tunnel header), patched per frame with the lengths, the IPv4
 * header checksum, the entropy source port and the VNI. */
#define DP_TUN_HDR_LEN 50	/* Ethernet 14 + IPv4 20 + UDP 8 + VXLAN/Geneve 8 */
/* Geneve option bytes the TC program walks on receive and pushes on
 * transmit (userspace pushes at most 8 options of 8 bytes); a packet
 * with more goes to userspace. XDP takes none. */
#define DP_GENEVE_OPT_MAX 64
#define DP_TUN_MAX_HDR (DP_TUN_HDR_LEN + DP_GENEVE_OPT_MAX)
#define DP_VNI_ANY 0xffffffff	/* dp_tun_rx.vni of a key=flow port */
enum { DP_TUN_VXLAN = 1, DP_TUN_GENEVE = 2 };
/* Entries of a Geneve port's TLV map (tun_metadata0..7). */
#define DP_TLV_MAX 8
/* dp_tun_tx.flags: the port sends an outer UDP checksum (csum=true). */
#define DP_TUN_TX_CSUM 1

struct dp_tun_rx_key {
	__u32 ifindex;	/* the underlay */
	__u32 local;	/* outer destination, host order */
	__u32 remote;	/* outer source */
	__u32 vni;	/* or DP_VNI_ANY */
	__u16 dst_port;
	__u16 pad;	/* always 0 */
};
_Static_assert(sizeof(struct dp_tun_rx_key) == 20, "dp_tun_rx_key layout");

/* One entry of a Geneve port's TLV map: option (class, type) -> slot. */
struct dp_tlv {
	__u16 opt_class;	/* host order */
	__u8 type;		/* critical bit (0x80) included, as mapped */
	__u8 slot;		/* tun_metadata<slot> */
};

struct dp_tun_rx {
	__u32 in_port;	/* the tunnel port */
	__u32 kind;	/* DP_TUN_* */
	__u32 n_tlv;	/* entries of tlv in use (Geneve, TC) */
	__u32 pad;
	struct dp_tlv tlv[DP_TLV_MAX];
};
_Static_assert(sizeof(struct dp_tun_rx) == 48, "dp_tun_rx layout");

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
	__u16 flags;	/* DP_TUN_TX_* */
};
_Static_assert(sizeof(struct dp_tun_tx) == 68, "dp_tun_tx layout");

/* The scratch copy of a dp_tun_tx entry. */
struct dp_tun_copy {
	__u32 valid;
	__u32 tx_slot;
	__u32 inner_mtu;
	__u8 hdr[DP_TUN_HDR_LEN];
	__u16 flags;
	/* TC, set by the pre-check: how the outer UDP checksum is written
	 * (DP_CSUM_*), the VNI, whether the frame is a GSO super-frame, and
	 * the Geneve options (olen bytes; crit: the header's C bit). */
	__u32 csum_mode;
	__u32 vni;
	__u32 gso;
	__u32 olen;
	__u32 crit;
	__u8 opts[DP_GENEVE_OPT_MAX];
	/* tc_encap's buffers (kept off its stack: it runs below tc_dp's). */
	__u8 eth[16];
	__u8 ph[40];
};
enum {
	DP_CSUM_NONE = 0,	/* csum=false: 0 */
	DP_CSUM_FULL,		/* summed over the bytes, as userspace does */
	DP_CSUM_LCO,		/* inner checksum pending: from the headers */
	DP_CSUM_ZERO,		/* GSO super-frame: 0 (IPv4 allows it) */
};

/* Header offsets while the actions run; see the verifier notes above. */
struct dp_scratch {
	__u32 l3_off;
	__u32 l4_off;
	__u32 l3;	/* DP_L3_* */
	__u32 l4;	/* DP_L4_* */
	__u32 later_frag;
	__u32 pad;
	/* The frame's key and the lookup key: 128 bytes that would
	 * not fit the 512-byte BPF stack next to the parser's locals. */
	union dp_key key;
	struct dp_flow_key hk;
	struct dp_tun_copy tun;	/* the flow's tunnel header, when it has one */
	/* TC: the receiving Geneve port's TLV map, for tun_geneve_opts. */
	__u32 n_tlv;
	struct dp_tlv tlv[DP_TLV_MAX];
	/* The receiving interface's dp_ports entry (dp_port_of's copy). */
	struct dp_port port;
	/* dp_coarse_now's cache: jiffies when this CPU last read the coarse
	 * clock, and what it read. */
	__u64 clk_jiffies;
	__u64 clk_ns;
};

enum { DP_L3_NONE = 0, DP_L3_IPV4, DP_L3_IPV6, DP_L3_ARP, DP_L3_OTHER };
enum { DP_L4_NONE = 0, DP_L4_TCP, DP_L4_UDP, DP_L4_ICMP, DP_L4_ICMPV6, DP_L4_SCTP, DP_L4_OTHER };

/* Slots for DP_OP_DROP reasons (userspace DropReason::ALL must fit). */
#define DP_DROP_REASONS 4
/* DropReason::Meter's index in DropReason::ALL. */
#define DP_DROP_METER 3

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
	DP_STAT_DECAP,		/* tunnel frames decapsulated (XDP: hit or not;
				 * TC: hits, which alone are decapsulated) */
	DP_STAT_ENCAP,		/* frames encapsulated and sent to an underlay */
	/* Drops by reason, as the userspace datapath counts them (`nicflow
	 * stats` adds these to its own): */
	DP_STAT_DROP_POLICY,	/* empty action list (userspace: "policy") */
	DP_STAT_DROP_REASON,	/* DP_OP_DROP, + arg16 (a DropReason index) */
	DP_STAT_N = DP_STAT_DROP_REASON + DP_DROP_REASONS,
};

/* ---- meters -------------------------------------------------------------
 * dp_meters value: OpenFlow 1.3 token buckets, the same algorithm as the
 * userspace datapath (datapath::meter, after OVS dp_netdev_run_meter), one
 * entry shared by every CPU under its spin lock. Units make the refill a
 * single multiply: kbit/s meters count microbits (a rate of R kbit/s adds R
 * per nanosecond, a byte costs 8e6), packet/s meters count nanopackets (R
 * per nanosecond, a packet costs 1e9); a bucket holds burst * 1e9 at most.
 * Userspace writes the configuration with BPF_F_LOCK and reads the
 * counters back the same way. */
#define DP_METER_BANDS	8
#define DP_METER_DROP	0
#define DP_METER_REMARK	1

struct dp_meter_band {
	__u64 bucket;
	__u64 max;
	__u64 rate;	/* units per nanosecond */
	__u64 fill_ns;	/* time an empty bucket takes to fill: max / rate */
	__u64 packets;	/* frames this band acted on */
	__u64 bytes;
	__u32 kind;	/* DP_METER_DROP or DP_METER_REMARK */
	__u32 prec_level;
};
_Static_assert(sizeof(struct dp_meter_band) == 56, "dp_meter_band layout");

struct dp_meter {
	struct bpf_spin_lock lock;
	__u32 n_bands;
	__u32 pktps;
	__u32 pad;
	__u64 last_ns;	/* bpf_ktime_get_ns() of the last refill */
	__u64 packets_in;
	__u64 bytes_in;
	struct dp_meter_band bands[DP_METER_BANDS];
};
_Static_assert(sizeof(struct dp_meter) == 40 + 56 * DP_METER_BANDS, "dp_meter layout");

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

/* dp_ports' entries again, direct-mapped by ifindex (slot ifindex &
 * (DP_PORT_SLOTS - 1), the owner's ifindex in the slot): an array lookup
 * the verifier inlines instead of a hash lookup, which cost a fifth of a
 * hit. A slot another port owns, or an empty one (ifindex 0), sends the
 * frame to dp_ports. Userspace writes dp_ports first and the slot after;
 * every write of a slot bumps its generation, and a change is three
 * writes (owner 0 with the old entry, owner 0 with the new one, then the
 * new owner). The program copies the entry and takes the copy only if
 * owner and generation, read as one word, were the same before and after
 * (a seqlock's reader): a frame never uses half of an entry, or another
 * port's. The reads rely on loads not passing loads (x86's TSO, which the
 * program's unaligned header loads already assume); a weakly ordered CPU
 * would need acquire loads here. */
#define DP_PORT_SLOTS 1024
struct dp_port_slot {
	__u32 ifindex;
	__u32 gen;
	struct dp_port port;
};
_Static_assert(sizeof(struct dp_port_slot) == 32, "dp_port_slot layout");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_PORT_SLOTS);
	__type(key, __u32);
	__type(value, struct dp_port_slot);
} dp_port_slots SEC(".maps");

/* The port entry of `ifindex` copied into *out: 0, or -1 when the
 * interface is not a port. A global function: the verifier checks its
 * paths (slot taken, slot torn, hash entry) once on their own, and the
 * caller goes on with one state whichever was taken. */
__attribute__((noinline)) int dp_port_of(__u32 ifindex, struct dp_port *out)
{
	__u32 s = ifindex & (DP_PORT_SLOTS - 1);
	struct dp_port_slot *ps = bpf_map_lookup_elem(&dp_port_slots, &s);
	struct dp_port *p;

	if (!out)
		return -1;
	if (ps) {
		__u64 before = *(volatile __u64 *)ps, after;

		asm volatile("" ::: "memory");
		if ((__u32)before == ifindex) {
			__builtin_memcpy(out, &ps->port, sizeof(*out));
			asm volatile("" ::: "memory");
			after = *(volatile __u64 *)ps;
			if (after == before)
				return 0;
		}
	}
	p = bpf_map_lookup_elem(&dp_ports, &ifindex);
	if (!p)
		return -1;
	__builtin_memcpy(out, p, sizeof(*out));
	return 0;
}

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
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);	/* meter id */
	__type(value, struct dp_meter);
} dp_meters SEC(".maps");

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

/* The mask-hint cache (dp_exec.h dp_lookup): per CPU, direct-mapped by the
 * hash of the whole key. Only a hint: every use is verified by the probe,
 * so userspace never writes it (a removed mask's hints fail their probe
 * and are overwritten). */
#define DP_MASK_HINTS 4096
struct dp_mask_hint {
	__u32 tag;	/* high half of the key hash | 1; 0 = empty */
	__u32 mask_idx;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DP_MASK_HINTS);
	__type(key, __u32);
	__type(value, struct dp_mask_hint);
} dp_mask_hint SEC(".maps");

/* Per-packet select groups (DP_OP_SELECT). The rotation is per CPU and per
 * group slot (the encoder's), as userspace's datapath::select keeps it per
 * group: rr counts packets, wrr/splb keep nginx's smooth weighted round
 * robin values. Weights (wrr: the buckets'; splb: what the daemon
 * publishes from the paths' congestion) come from dp_select_w, by the
 * bucket's position in the action. */
#define DP_SELECT_MAX	8
#define DP_SELECT_SLOTS	256
enum { DP_SEL_RR = 0, DP_SEL_WRR = 1, DP_SEL_SPLB = 2 };

struct dp_select_state {
	__u32 next;
	__u32 pad;
	__s64 cur[DP_SELECT_MAX];
};

struct dp_select_weights {
	__u32 w[DP_SELECT_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DP_SELECT_SLOTS);
	__type(key, __u32);
	__type(value, struct dp_select_state);
} dp_select SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_SELECT_SLOTS);
	__type(key, __u32);
	__type(value, struct dp_select_weights);
} dp_select_w SEC(".maps");

/* ---- helpers ------------------------------------------------------------ */
static __always_inline void stat_inc(__u32 idx)
{
#ifdef DP_PROF_NO_STATS	/* profiling builds only (tc_dp.c, DP_PROF_STOP) */
	return;
#endif
	__u64 *v = bpf_map_lookup_elem(&dp_stats, &idx);

	if (v)
		*v += 1;	/* per-CPU: no atomics needed */
}

/* Big-endian loads and stores of packet or map bytes: one load or store
 * and a byte swap. The address may be unaligned: the verifier allows that
 * for packet and map-value pointers on architectures with efficient
 * unaligned access (x86, arm64), and the JIT emits a plain load; a stack
 * pointer must be aligned (the verifier says so at load time). Byte-wise
 * reads cost four loads, three shifts and three ors for a rd32, on every
 * header field the parser reads. */
static __always_inline __u16 rd16(const __u8 *p)
{
	return __builtin_bswap16(*(const __u16 *)p);
}

static __always_inline __u32 rd32(const __u8 *p)
{
	return __builtin_bswap32(*(const __u32 *)p);
}

static __always_inline void wr16(__u8 *p, __u16 v)
{
	*(__u16 *)p = __builtin_bswap16(v);
}

static __always_inline void wr32(__u8 *p, __u32 v)
{
	*(__u32 *)p = __builtin_bswap32(v);
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
static __always_inline int parse_l4(DP_CTX *ctx, union dp_key *key, struct dp_scratch *st,
				    __u32 base, __u8 proto, __u32 off, __u32 seglen, int v6,
				    int is_frag)
{
	__u8 *data = DP_DATA(ctx) + base;
	__u8 *end = DP_DATA_END(ctx);
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
/* `hw_tci`: the outer tag the kernel already took out of the frame
 * (TC: skb->vlan_tci | 0x1000 when skb->vlan_present; the receive path
 * untags before the TC hook), 0 for none (XDP always sees tags in-band).
 * It is the key's outer tag, an in-band one then the inner.
 * `base`: where the frame starts in the packet (0, or DP_TUN_HDR_LEN plus
 * the Geneve options for the inner frame of a tunnel packet the TC
 * program decapsulates only on a hit); the offsets left in `st` count
 * from there. */
static __always_inline int parse(DP_CTX *ctx, union dp_key *key, struct dp_scratch *st,
				 __u32 in_port, __u16 hw_tci, __u32 base)
{
	__u8 *data, *end = DP_DATA_END(ctx);
	__u64 flen = dp_len(ctx);
	__u32 off = 14;
	__u16 et, t1 = 0, t2 = 0;

	if (base > DP_TUN_MAX_HDR || flen < base)
		return -1;
	data = DP_DATA(ctx) + base;
	flen -= base;

	if (data + 14 > end)
		return -1;
	key->f.in_port = in_port;
	__builtin_memcpy(key->f.dl_dst, data, 6);
	__builtin_memcpy(key->f.dl_src, data + 6, 6);
	et = rd16(data + 12);
	if (is_vlan_tpid(et)) {
		if (data + 18 > end)
			return -1;
		t1 = rd16(data + 14) | 0x1000;
		et = rd16(data + 16);
		off = 18;
		if (is_vlan_tpid(et)) {
			if (hw_tci || data + 22 > end)
				return -1;	/* a third tag: a parse error in userspace */
			t2 = rd16(data + 18) | 0x1000;
			et = rd16(data + 20);
			off = 22;
			if (is_vlan_tpid(et))
				return -1;
		}
	}
	if (hw_tci) {
		key->f.vlan_tci = hw_tci;
		key->f.vlan_tci2 = t1;
	} else {
		key->f.vlan_tci = t1;
		key->f.vlan_tci2 = t2;
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
		return parse_l4(ctx, key, st, base, key->f.nw_proto, off + ihl, total - ihl, 0,
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
		return parse_l4(ctx, key, st, base, nh, off + 40, plen, 1, 0);
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

#ifdef DP_TC
/* TC: the skb's checksum state decides how a covered field's change is
 * folded in (CHECKSUM_PARTIAL: the field holds the pseudo-header sum and
 * only address changes touch it; CHECKSUM_COMPLETE: skb->csum follows
 * pseudo-header changes), which the program cannot read: the kernel's
 * bpf_l4_csum_replace does exactly what its own NAT does. Same RFC 1624
 * arithmetic otherwise, and the same "old == new leaves it alone" and UDP
 * zero rules as userspace, so frames without partial sums come out
 * bit-identical. `c` is a packet pointer, turned into an offset. A helper
 * failure is -1: the frame is aborted rather than sent with a stale sum. */
static __always_inline int tc_patch_l4(DP_CTX *ctx, __u32 off, int udp, __u32 old, __u32 new,
				       int pseudo)
{
	__u64 flags = (pseudo ? BPF_F_PSEUDO_HDR : 0) | (udp ? BPF_F_MARK_MANGLED_0 : 0);

	if (old == new)
		return 0;
	if (pseudo)
		return bpf_l4_csum_replace(ctx, off, bpf_htonl(old), bpf_htonl(new), flags | 4) ? -1 : 0;
	return bpf_l4_csum_replace(ctx, off, bpf_htons((__u16)old), bpf_htons((__u16)new),
				   flags | 2) ? -1 : 0;
}
/* Offsets are taken before the helper runs: it invalidates every packet
 * pointer. */
#define DP_PKT_OFF(ctx, p) ((__u32)((p) - DP_DATA(ctx)))
#define DP_PATCH_PSEUDO(ctx, c, udp, old, new) tc_patch_l4(ctx, DP_PKT_OFF(ctx, c), udp, old, new, 1)
#define DP_PATCH_PORT(ctx, c, udp, old, new) tc_patch_l4(ctx, DP_PKT_OFF(ctx, c), udp, old, new, 0)
#else
#define DP_PATCH_PSEUDO(ctx, c, udp, old, new) (patch_l4_32(c, udp, old, new), 0)
#define DP_PATCH_PORT(ctx, c, udp, old, new) (patch_l4_16(c, udp, old, new), 0)
#endif

/* Pointer to the L4 checksum covering the pseudo header, or NULL if there
 * is none to patch (rewrite::pseudo_l4_csum); *udp set for UDP. *err set
 * when the header is not where the parser said (internal error). */
static __always_inline __u8 *pseudo_csum(DP_CTX *ctx, struct dp_scratch *st, int *udp,
					 int *err)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
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

static __always_inline int act_set_ipv4(DP_CTX *ctx, struct dp_scratch *st, __u32 field,
					__u32 new)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
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
		return DP_PATCH_PSEUDO(ctx, c, udp, old, new);
	return 0;
}

static __always_inline int act_set_ipv6(DP_CTX *ctx, struct dp_scratch *st, __u32 field,
					const __u8 *addr)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
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
	if (c) {
#ifdef DP_TC
		/* One diff for the whole address. bpf_l4_csum_replace also moves
		 * a CHECKSUM_COMPLETE skb->csum by it, as if an IPv4 header
		 * checksum had absorbed the change; IPv6 has none (the address
		 * and L4 checksum changes cancel in the sum), so it is moved
		 * back (a no-op for other checksum states). */
		__u32 coff = DP_PKT_OFF(ctx, c);
		__be32 ob[4], nb[4];
		__s64 d;

		if (old[0] == new[0] && old[1] == new[1] && old[2] == new[2] && old[3] == new[3])
			return 0;
		for (i = 0; i < 4; i++) {
			ob[i] = bpf_htonl(old[i]);
			nb[i] = bpf_htonl(new[i]);
		}
		d = bpf_csum_diff(ob, 16, nb, 16, 0);
		if (d < 0 || bpf_l4_csum_replace(ctx, coff, 0, (__u32)d,
						 BPF_F_PSEUDO_HDR | (udp ? BPF_F_MARK_MANGLED_0 : 0)))
			return -1;
		bpf_csum_update(ctx, (__u32)d);
#else
		patch_l4_128(c, udp, old, new);
#endif
	}
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
static __always_inline int act_ip_byte(DP_CTX *ctx, struct dp_scratch *st, __u32 op,
				       __u8 v)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
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
#ifdef DP_TC
	/* No checksum covers these bytes, but a CHECKSUM_COMPLETE skb's sum
	 * does: fold the change of the header's first 8 bytes into it
	 * (bpf_csum_update is a no-op for any other checksum state). */
	__u32 before[2], after[2];

	__builtin_memcpy(before, ip, 8);
#endif
	if (op == DP_OP_SET_TOS) {
		ip[0] = (ip[0] & 0xf0) | (v >> 4);
		ip[1] = (ip[1] & 0x0f) | (__u8)(v << 4);
	} else {
		if (op == DP_OP_DEC_TTL) {
			if (ip[7] <= 1)
				return -1;
			v = ip[7] - 1;
		}
		ip[7] = v;
	}
#ifdef DP_TC
	__builtin_memcpy(after, ip, 8);
	bpf_csum_update(ctx, bpf_csum_diff(before, 8, after, 8, 0));
#endif
	return 0;
}

static __always_inline int act_set_tp(DP_CTX *ctx, struct dp_scratch *st, __u32 field,
				      __u16 port)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
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
		return DP_PATCH_PORT(ctx, p + 16, 0, old, port);
		return 0;
	}
	if (p + 8 > end)
		return -1;
	old = rd16(p + field);
	wr16(p + field, port);
	return DP_PATCH_PORT(ctx, p + 6, 1, old, port);
	return 0;
}

static __always_inline int act_set_arp(DP_CTX *ctx, struct dp_scratch *st,
				       struct dp_action *a)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
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

/* The outer in-band tag's VID and PCP from the flow, DEI kept (execute.rs
 * SetVlanTci); untagged: a no-op. */
static __always_inline int set_vlan_tci_inband(DP_CTX *ctx, __u16 tci)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);

	if (data + 16 > end)
		return -1;
	if (!is_vlan_tpid(rd16(data + 12)))
		return 0;
	wr16(data + 14, (rd16(data + 14) & 0x1000) | (tci & 0xefff));
	return 0;
}

static __always_inline int act_set_eth(DP_CTX *ctx, __u32 at, const __u8 *mac)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);

	if (data + 12 > end)
		return -1;
	if (at == 0)
		__builtin_memcpy(data, mac, 6);
	else
		__builtin_memcpy(data + 6, mac, 6);
	return 0;
}

