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
 * the parser; the encoder refuses VLAN push/pop/set, ARP rewrites and
 * tunnels for this engine (reasons `tc:vlan-action`, `tc:arp-rewrite`,
 * `tc:tunnel`), which therefore never reach the stubs below.
 */
#define DP_TC 1
#define DP_CTX struct __sk_buff
#define dp_len(ctx) ((ctx)->len)
#include "dp_core.h"

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

/* Refused by the encoder for this engine (see above): never executed. */
static __always_inline int act_push_vlan(DP_CTX *ctx, struct dp_scratch *st, __u16 tpid,
					 __u16 tci)
{
	return -1;
}

static __always_inline int act_pop_vlan(DP_CTX *ctx, struct dp_scratch *st)
{
	return -1;
}

static __always_inline int act_set_vlan_tci(DP_CTX *ctx, __u16 tci)
{
	return -1;
}

#include "dp_exec.h"

/* Headers the parser may read, made linear when they are not. */
#define DP_PULL_LEN (DP_MAX_L4_OFF + 20)

SEC("classifier")
int tc_dp(struct __sk_buff *ctx)
{
	__u32 zero = 0, ifindex = ctx->ingress_ifindex, arg = 0, up;
	__u16 hw_tci = 0;
	union dp_key *key;
	struct dp_flow_key *hk;
	struct dp_flow *flow;
	struct dp_scratch *st;
	struct dp_config *cfg;
	struct dp_port *port;
	struct dp_tx_if *tx;
	__u64 segs;
	int res;

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
	if (ctx->vlan_present)
		hw_tci = (__u16)ctx->vlan_tci | 0x1000;
	__builtin_memset(key, 0, sizeof(*key));
	if (parse(ctx, key, st, port->in_port, hw_tci) < 0) {
		/* Headers beyond the linear part (a super-frame's head may hold
		 * only part of them): pull them in and parse once more. Only
		 * then: a pull on every frame would copy payload out of the
		 * fragments of every TSO frame. */
		__u32 want = ctx->len < DP_PULL_LEN ? ctx->len : DP_PULL_LEN;

		if ((long)ctx->data + want <= (long)ctx->data_end ||
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
	flow = dp_lookup(key, hk, cfg);
	if (!flow) {
		stat_inc(DP_STAT_MISS);
		goto to_user;
	}
	if (dp_precheck(st, key, flow))
		goto punt;
	if (flow->flags & DP_F_TUNNEL)
		goto punt;	/* refused by the encoder */
	if (flow->flags & DP_F_OUTPUT) {
		__u32 slot = flow->out_slot;

		tx = bpf_map_lookup_elem(&dp_tx_ports, &slot);
		if (!tx || !tx->ifindex)
			goto punt;
	}

	/* A GSO super-frame is as many packets as it will be segments. */
	segs = ctx->gso_segs > 1 ? ctx->gso_segs : 1;
	dp_count(cfg, flow, key, segs, ctx->len);
	res = dp_exec(ctx, st, flow, &arg);
	if (res == DP_RES_OUTPUT) {
		tx = bpf_map_lookup_elem(&dp_tx_ports, &arg);
		if (!tx || !tx->ifindex) {
			stat_inc(DP_STAT_ABORTED);
			return TC_ACT_SHOT;
		}
		if (tx->flags & DP_TX_PEER)
			return bpf_redirect_peer(tx->ifindex, 0);
		return bpf_redirect(tx->ifindex, 0);
	}
	if (res == DP_RES_DROP)
		return TC_ACT_SHOT;
	if (res != DP_RES_ABORT)
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
