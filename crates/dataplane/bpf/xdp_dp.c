// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * xdp_dp: nicflow's XDP datapath (issue 5, "offload the fast path to
 * XDP/eBPF"). The Rust side is crates/nicflow/src/offload/kernel/; the design
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
#define DP_CTX struct xdp_md
#define CTX_DATA_OFF 0		/* offsetof(struct xdp_md, data) */
#define CTX_DATA_END_OFF 4
#define dp_len(ctx) bpf_xdp_get_buff_len(ctx)
#define dp_load_bytes(ctx, off, buf, n) bpf_xdp_load_bytes(ctx, off, buf, n)
/* XDP has bytes only: every outer UDP checksum is verified. */
#define dp_outer_csum_trusted(ctx, gso) 0
#include "dp_core.h"
_Static_assert(__builtin_offsetof(struct xdp_md, data) == CTX_DATA_OFF, "data");
_Static_assert(__builtin_offsetof(struct xdp_md, data_end) == CTX_DATA_END_OFF, "data_end");

/* ---- I/O maps ------------------------------------------------------------ */
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

/* ---- VLAN actions: move the MAC header within the head room ------------- */
static __always_inline int act_push_vlan(struct xdp_md *ctx, struct dp_scratch *st, __u16 tpid,
					 __u16 tci)
{
	__u8 *data, *end;
	__u8 mac[12];

	if (bpf_xdp_adjust_head(ctx, -4))
		return -1;
	data = DP_DATA(ctx);
	end = DP_DATA_END(ctx);
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
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
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

static __always_inline int act_set_vlan_tci(struct xdp_md *ctx, struct dp_scratch *st,
					    __u16 tci)
{
	return set_vlan_tci_inband(ctx, tci);
}


#include "dp_exec.h"

#include "dp_tunnel.h"

/* ---- tunnel output -------------------------------------------------------- */
/* Push the tunnel's outer header and redirect to its underlay. The flow's
 * pre-check made sure the header is resolved, the underlay slot is there
 * and the frame fits. */
static __always_inline int act_tunnel_output(struct xdp_md *ctx, struct dp_scratch *st,
					     union dp_key *key, struct dp_action *a)
{
	/* The header the pre-check copied (the same slot: the encoder writes
	 * it to both places). */
	struct dp_tun_copy *tpl = &st->tun;
	__u32 vni;
	__u8 *data, *end;
	__u16 sport;

	if (!tpl->valid)
		return -1;
	sport = entropy_port(ctx, st, key);
	if (!sport)
		return -1;
	vni = tun_vni(tpl, key, a);
	if (bpf_xdp_adjust_head(ctx, -DP_TUN_HDR_LEN))
		return -1;
	data = DP_DATA(ctx);
	end = DP_DATA_END(ctx);
	if (data + DP_TUN_HDR_LEN > end)
		return -1;
	__builtin_memcpy(data, tpl->hdr, DP_TUN_HDR_LEN);
	tun_hdr_patch(data, bpf_xdp_get_buff_len(ctx) - 14, sport, vni, 0, 0);
	stat_inc(DP_STAT_ENCAP);
	stat_inc(DP_STAT_OUTPUT);
	return bpf_redirect_map(&dp_tx_ports, tpl->tx_slot, 0);
}

/* ---- the program ---------------------------------------------------------- */
SEC("xdp.frags")
int xdp_dp(struct xdp_md *ctx)
{
	__u32 zero = 0, ifindex = ctx->ingress_ifindex, in_port, arg = 0;
	int decapped = 0, res, punted;
	union dp_key *key;
	struct dp_flow_key *hk;
	struct dp_flow *flow;
	struct dp_scratch *st;
	struct dp_config *cfg;
	struct dp_port *port;

	stat_inc(DP_STAT_RX);
	st = bpf_map_lookup_elem(&dp_scratch, &zero);
	if (!st)
		return XDP_PASS;
	/* The port's entry, copied into the scratch (see tc_dp.c). */
	port = &st->port;
	if (dp_port_of(ifindex, port)) {
		/* Not a port of ours (yet): the host stack's, never another
		 * interface's socket. */
		stat_inc(DP_STAT_NO_PORT);
		return XDP_PASS;
	}
	cfg = bpf_map_lookup_elem(&dp_config, &zero);
	if (!cfg)
		goto to_user;
	key = &st->key;
	hk = &st->hk;
	__builtin_memset(key, 0, sizeof(*key));
	hk->pad = 0;
	in_port = port->in_port;
	if (port->flags & DP_PORT_UNDERLAY) {
		__u32 hl;
		int tp = tun_rx_lookup(ctx, port, key, 0, &hl);

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
	if (parse(ctx, key, st, in_port, 0, 0) < 0) {
		stat_inc(DP_STAT_UNPARSED);
		goto to_user;
	}
	flow = dp_find(st, cfg, &punted);
	if (!flow) {
		if (punted)
			goto punt;
		goto to_user;
	}
	/* A per-packet select: the frame runs, and is counted by, its chosen
	 * bucket's flow (userspace sums the buckets' counters). */
	if (flow->flags & DP_F_SELECT) {
		flow = dp_select_bucket(st, flow);
		if (!flow)
			goto punt;
	}

	if (flow->flags & DP_F_OUTPUT) {
		__u32 slot = flow->out_slot;

		if (!bpf_map_lookup_elem(&dp_tx_ports, &slot))
			goto punt;
	}
	if (flow->flags & DP_F_TUNNEL) {
		__u32 slot = flow->out_slot;

		if (tun_tx_load(st, slot))
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

	dp_count(cfg, st, flow, 1, bpf_xdp_get_buff_len(ctx));
	res = dp_exec(ctx, st, flow, &arg, 1, bpf_xdp_get_buff_len(ctx));
	if (res == DP_RES_OUTPUT)
		return bpf_redirect_map(&dp_tx_ports, arg, 0);
	if (res == DP_RES_DROP)
		return XDP_DROP;
	if (res == DP_RES_TUNNEL && arg < DP_MAX_ACTIONS) {
		int r = act_tunnel_output(ctx, st, key, &flow->actions[arg]);

		if (r >= 0)
			return r;
		stat_inc(DP_STAT_ABORTED);
	}
	return XDP_ABORTED;

punt:
	stat_inc(DP_STAT_PUNT);
to_user:
	if (decapped && bpf_xdp_adjust_head(ctx, -DP_TUN_HDR_LEN))
		return XDP_ABORTED;
	return bpf_redirect_map(&dp_xsks, port->xsk_base + ctx->rx_queue_index, XDP_PASS);
}

/* GPL for the GPL-only helpers (the file is Apache-2.0 OR GPL-2.0-only). */
char _license[] SEC("license") = "GPL";
