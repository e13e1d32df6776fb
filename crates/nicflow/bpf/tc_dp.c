// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * tc_dp: nicflow's TC datapath (issue 12). The same datapath as xdp_dp.c
 * (dp_core.h, dp_exec.h: key, maps, parser, lookup, rewrites), attached at
 * TC ingress (tcx link, kernel >= 6.6; cls_bpf direct-action on clsact
 * before that) of a port's interface instead of XDP. Rust side:
 * crates/nicflow/src/offload/xdp/engine.rs (EngineKind::Tc); design in
 * docs/offload.md.
 *
 * Why a second attach point: XDP on a veth turns GSO off on its peer and
 * never sees CHECKSUM_PARTIAL, so a plain host behind a veth sends MTU
 * frames with finished checksums through XDP. At TC the frame is an skb:
 * TSO super-frames and partial checksums cross whole, and the redirect
 * keeps them so (bpf_redirect_peer straight into the receiving
 * namespace's veth, or bpf_redirect to a device's egress).
 *
 *   host A's veth peer -> veth -> netif_receive_skb -> **this program**:
 *     hit  -> count, rewrite (checksums through bpf_l4_csum_replace so
 *             partial and complete sums stay right), then
 *             bpf_redirect_peer / bpf_redirect (dp_tx_ports[slot]) or drop
 *     miss -> bpf_redirect to the port's upcall veth (dp_ports.upcall_
 *             ifindex): the kernel segments and checksums there (its
 *             offloads are off), the daemon reads the peer with AF_PACKET,
 *             executes the first packets itself and installs the flow.
 *     not a port / no upcall device -> TC_ACT_UNSPEC: the next program
 *             on the hook, the port's own tc_upcall (tc_upcall.c), which
 *             sends every frame up while no engine serves the port.
 *
 * Differences from xdp_dp.c, all I/O: the outer VLAN tag of a received
 * frame is already out of the frame (skb->vlan_tci), so it is passed to
 * the parser, and VLAN push/pop/set go through the kernel's helpers; the
 * encoder refuses ARP rewrites and tunnels for this engine (reasons
 * `tc:arp-rewrite`, `tc:tunnel`).
 */
#define DP_TC 1
#define DP_CTX struct __sk_buff
#define CTX_DATA_OFF 76		/* offsetof(struct __sk_buff, data) */
#define CTX_DATA_END_OFF 80
#define dp_len(ctx) ((ctx)->len)
#include "dp_core.h"
_Static_assert(__builtin_offsetof(struct __sk_buff, data) == CTX_DATA_OFF, "data");
_Static_assert(__builtin_offsetof(struct __sk_buff, data_end) == CTX_DATA_END_OFF, "data_end");

/* Verdicts (tcx: TCX_NEXT, TCX_DROP; cls_bpf direct-action the same). */
#define TC_ACT_UNSPEC (-1)	/* the next program on the hook decides */
#define TC_ACT_SHOT 2

/* dp_tx_ports value: where an output slot sends. */
#define DP_TX_PEER 1	/* a veth whose peer is in another namespace:
			 * bpf_redirect_peer (straight to the peer's rx) */
struct dp_tx_if {
	__u32 ifindex;	/* 0: empty slot (flows to it are punted) */
	__u32 flags;	/* DP_TX_* */
};
_Static_assert(sizeof(struct dp_tx_if) == 8, "dp_tx_if layout");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct dp_tx_if);
} dp_tx_ports SEC(".maps");

/* ---- VLAN actions: the kernel's helpers --------------------------------
 * At TC the outer tag usually lives in skb metadata (skb->vlan_tci), not in
 * the bytes, and the helpers move tags between the two (a pop takes the
 * metadata tag, then lifts the next in-band tag into the metadata; a push
 * first writes an existing metadata tag into the frame). So after each one
 * the L3/L4 offsets are re-derived from the frame rather than adjusted. */
static __always_inline int tc_reoffset(DP_CTX *ctx, struct dp_scratch *st)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
	__u32 old = RD32(st->l3_off), l4 = RD32(st->l4_off), off = 12;
	int i;

#pragma unroll
	for (i = 0; i < 3; i++) {
		if (data + off + 2 > end)
			return -1;
		if (!is_vlan_tpid(rd16(data + off)))
			break;
		off += 4;
	}
	off += 2;
	if (old > DP_MAX_L3_OFF || l4 < old || l4 - old > 60)
		return -1;
	RD32(st->l3_off) = off;
	RD32(st->l4_off) = off + (l4 - old);
	return 0;
}

static __always_inline int act_push_vlan(DP_CTX *ctx, struct dp_scratch *st, __u16 tpid,
					 __u16 tci)
{
	if (bpf_skb_vlan_push(ctx, bpf_htons(tpid), tci))
		return -1;
	return tc_reoffset(ctx, st);
}

/* Untagged: a no-op, as rewrite::pop_vlan (the helper agrees). */
static __always_inline int act_pop_vlan(DP_CTX *ctx, struct dp_scratch *st)
{
	if (bpf_skb_vlan_pop(ctx))
		return -1;
	return tc_reoffset(ctx, st);
}

/* VID and PCP from the flow, DEI kept (execute.rs SetVlanTci); untagged:
 * a no-op. */
static __always_inline int act_set_vlan_tci(DP_CTX *ctx, struct dp_scratch *st, __u16 tci)
{
	if (ctx->vlan_present) {
		__u16 proto = (__u16)ctx->vlan_proto;
		__u16 new = ((__u16)ctx->vlan_tci & 0x1000) | (tci & 0xefff);

		/* Pop lifts an in-band inner tag into the metadata, push puts
		 * it back: the tag order is kept. */
		if (bpf_skb_vlan_pop(ctx) || bpf_skb_vlan_push(ctx, proto, new))
			return -1;
		return tc_reoffset(ctx, st);
	}
	return set_vlan_tci_inband(ctx, tci);
}

#include "dp_exec.h"

/* Headers the parser may read, made linear when they are not. */
#define DP_PULL_LEN (DP_MAX_L4_OFF + 20)

SEC("classifier")
int tc_dp(struct __sk_buff *ctx)
{
	__u32 zero = 0, ifindex = ctx->ingress_ifindex, arg = 0, up;
	/* Context fields read once, before any helper runs. */
	__u32 len = ctx->len, gso_segs = ctx->gso_segs, vlan = ctx->vlan_present;
	__u32 out_slot = 0, out_if = 0, out_flags = 0;
	__u16 hw_tci = vlan ? (__u16)ctx->vlan_tci | 0x1000 : 0;
	union dp_key *key;
	struct dp_flow_key *hk;
	struct dp_flow *flow;
	struct dp_scratch *st;
	struct dp_config *cfg;
	struct dp_port *port;
	struct dp_tx_if *tx;
	int res, punted;

	stat_inc(DP_STAT_RX);
	port = bpf_map_lookup_elem(&dp_ports, &ifindex);
	if (!port) {
		/* Not (yet) a port of ours: the next program decides (the
		 * port's own tc_upcall, or the host stack). */
		stat_inc(DP_STAT_NO_PORT);
		return TC_ACT_UNSPEC;
	}
	up = port->upcall_ifindex;
	st = bpf_map_lookup_elem(&dp_scratch, &zero);
	cfg = bpf_map_lookup_elem(&dp_config, &zero);
	if (!st || !cfg)
		goto to_user;
	key = &st->key;
	hk = &st->hk;
	hk->pad = 0;
	__builtin_memset(key, 0, sizeof(*key));
	if (parse(ctx, key, st, port->in_port, hw_tci) < 0) {
		/* Headers beyond the linear part (a super-frame's head may hold
		 * only part of them): pull them in and parse once more. Only
		 * then: a pull on every frame would copy payload out of the
		 * fragments of every TSO frame. */
		__u32 want = len < DP_PULL_LEN ? len : DP_PULL_LEN;

		if (DP_DATA(ctx) + want <= DP_DATA_END(ctx) ||
		    bpf_skb_pull_data(ctx, want)) {
			stat_inc(DP_STAT_UNPARSED);
			goto to_user;
		}
		__builtin_memset(key, 0, sizeof(*key));
		if (parse(ctx, key, st, port->in_port, hw_tci) < 0) {
			stat_inc(DP_STAT_UNPARSED);
			goto to_user;
		}
	}
	flow = dp_find(st, cfg, &punted);
	if (!flow) {
		if (punted)
			goto punt;
		goto to_user;
	}
	if (flow->flags & DP_F_TUNNEL)
		goto punt;	/* refused by the encoder */
	if (flow->flags & DP_F_OUTPUT) {
		/* The output slot is read once, here: the redirect below uses
		 * what the pre-check saw. */
		out_slot = flow->out_slot;
		tx = bpf_map_lookup_elem(&dp_tx_ports, &out_slot);
		if (!tx || !tx->ifindex)
			goto punt;
		out_if = tx->ifindex;
		out_flags = tx->flags;
	}

	/* A GSO super-frame is as many packets as it will be segments; its
	 * bytes are the super-frame's. A tag in skb metadata is counted as
	 * the 4 bytes it is on the wire. */
	dp_count(cfg, flow, key, gso_segs > 1 ? gso_segs : 1, len + (vlan ? 4 : 0));
	res = dp_exec(ctx, st, flow, &arg);
	if (res == DP_RES_OUTPUT) {
		/* The encoder makes OUTPUT the flow's out_slot, always. */
		if (arg != out_slot || !out_if) {
			stat_inc(DP_STAT_ABORTED);
			return TC_ACT_SHOT;
		}
		if (out_flags & DP_TX_PEER)
			return bpf_redirect_peer(out_if, 0);
		return bpf_redirect(out_if, 0);
	}
	if (res == DP_RES_TUNNEL)	/* refused by the encoder */
		stat_inc(DP_STAT_ABORTED);
	return TC_ACT_SHOT;

punt:
	stat_inc(DP_STAT_PUNT);
to_user:
	if (up)
		return bpf_redirect(up, 0);
	return TC_ACT_UNSPEC;
}

char _license[] SEC("license") = "GPL";
