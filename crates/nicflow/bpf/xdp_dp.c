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
#define DP_CTX struct xdp_md
#define CTX_DATA_OFF 0		/* offsetof(struct xdp_md, data) */
#define CTX_DATA_END_OFF 4
#define dp_len(ctx) bpf_xdp_get_buff_len(ctx)
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
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
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
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
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
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
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
	data = DP_DATA(ctx);
	end = DP_DATA_END(ctx);
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
	__u32 zero = 0, ifindex = ctx->ingress_ifindex, in_port, arg = 0;
	int decapped = 0, res, punted;
	union dp_key *key;
	struct dp_flow_key *hk;
	struct dp_flow *flow;
	struct dp_tun_tx *tpl;
	struct dp_scratch *st;
	struct dp_config *cfg;
	struct dp_port *port;

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
	if (parse(ctx, key, st, in_port, 0) < 0) {
		stat_inc(DP_STAT_UNPARSED);
		goto to_user;
	}
	flow = dp_find(st, cfg, &punted);
	if (!flow) {
		if (punted)
			goto punt;
		goto to_user;
	}

	if (flow->flags & DP_F_OUTPUT) {
		__u32 slot = flow->out_slot;

		if (!bpf_map_lookup_elem(&dp_tx_ports, &slot))
			goto punt;
	}
	if (flow->flags & DP_F_TUNNEL) {
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

	dp_count(cfg, flow, key, 1, bpf_xdp_get_buff_len(ctx));
	res = dp_exec(ctx, st, flow, &arg);
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
