// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * tc_dp: nicflow's TC datapath (issue 12). The same datapath as xdp_dp.c
 * (dp_core.h, dp_exec.h: key, maps, parser, lookup, rewrites), attached at
 * TC ingress (tcx link, kernel >= 6.6; cls_bpf direct-action on clsact
 * before that) of a port's interface instead of XDP. Rust side:
 * crates/nicflow/src/offload/kernel/engine.rs (EngineKind::Tc); design in
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
 * encoder refuses ARP rewrites for this engine (`tc:arp-rewrite`).
 *
 * Tunnels (VXLAN, Geneve without options), keeping GSO:
 *   underlay rx -> tun_rx_lookup (dp_tunnel.h: the checks userspace makes)
 *     -> the inner frame is parsed and looked up *in place* (parse() at
 *        base DP_TUN_HDR_LEN), so a miss goes up whole and untouched;
 *     hit -> bpf_skb_adjust_room(-50, MAC) after the inner Ethernet header
 *        was copied over the outer one. BPF_F_ADJ_ROOM_FIXED_GSO keeps a
 *        super-frame's gso_size (the inner MSS); DECAP_L3_IPV6 makes
 *        skb->protocol the inner one, which bpf_redirect_peer needs (no
 *        eth_type_trans on that path). Frames whose inner protocol the
 *        helper cannot express (ARP, an inner VLAN tag) leave through the
 *        transmit path, where eth_type_trans sets it.
 *   tunnel output -> bpf_skb_adjust_room(+50, MAC, ENCAP_L3_IPV4 |
 *        ENCAP_L4_UDP | ENCAP_L2_ETH | ENCAP_L2(14) | FIXED_GSO): a TCP
 *        super-frame becomes SKB_GSO_UDP_TUNNEL with its inner headers
 *        marked, so whoever segments it (a NIC, the kernel's GSO) cuts
 *        VXLAN segments, and a receiver's stack takes it whole.
 * Both leave the frame with SKB_GSO_DODGY set (the helper's doing): a
 * device without NETIF_F_GSO_ROBUST (a veth) segments such a super-frame
 * on transmit, so outputs prefer bpf_redirect_peer, which does not
 * transmit.
 */
#define DP_TC 1
#define DP_CTX struct __sk_buff
#define CTX_DATA_OFF 76		/* offsetof(struct __sk_buff, data) */
#define CTX_DATA_END_OFF 80
#define dp_len(ctx) ((ctx)->len)
#define dp_load_bytes(ctx, off, buf, n) bpf_skb_load_bytes(ctx, off, buf, n)
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

/* ---- the outer UDP checksum of a received tunnel packet -----------------
 * The kernel does not verify a checksum the skb vouches for: a GSO
 * super-frame (built by a local stack, or by GRO from segments that were
 * verified), CHECKSUM_UNNECESSARY (the device checked it), and
 * CHECKSUM_PARTIAL (a local sender's checksums still pending: the outer
 * one, written with local checksum offload, is right once the inner one
 * is finished). The kernel's VXLAN sends exactly that by default (outer
 * UDP checksum on, inner TCP/UDP checksum partial), so verifying the bytes
 * as XDP must would send every such frame to userspace. TC cannot read
 * ip_summed, but bpf_l4_csum_replace without BPF_F_PSEUDO_HDR leaves the
 * field of a CHECKSUM_PARTIAL skb alone (inet_proto_csum_replace4) and
 * changes it otherwise: the probe runs on the outer IPv4 ID, whose value
 * is written back when it changed. Anything else is verified over the
 * bytes (udp4_csum_ok), and what fails goes to userspace, which decides. */
/* 1 when the skb's checksum is CHECKSUM_PARTIAL (a local sender's sum
 * still pending): bpf_l4_csum_replace without BPF_F_PSEUDO_HDR leaves the
 * 2-byte field at `off` of such an skb alone and changes it for any other,
 * in which case the old value is written back. 0 otherwise, -1 on a
 * helper failure. */
static __always_inline int tc_csum_partial(struct __sk_buff *ctx, __u32 off)
{
	__u8 *data, *end;
	__u16 v;

	asm volatile("" : "+r"(off));
	if (off > 64)
		return -1;
	data = DP_DATA(ctx);
	end = DP_DATA_END(ctx);
	if (data + off + 2 > end)
		return -1;
	v = rd16(data + off);
	if (bpf_l4_csum_replace(ctx, off, 0, 1, 2))
		return -1;
	data = DP_DATA(ctx);
	end = DP_DATA_END(ctx);
	if (data + off + 2 > end)
		return -1;
	if (rd16(data + off) == v)
		return 1;
	wr16(data + off, v);
	return 0;
}

static __always_inline int dp_outer_csum_trusted(struct __sk_buff *ctx, int gso)
{
	if (gso)
		return 1;
	if (bpf_csum_level(ctx, BPF_CSUM_LEVEL_QUERY) >= 0)
		return 1;	/* CHECKSUM_UNNECESSARY: level 0 is the outer UDP */
	/* The probe runs on the outer IPv4 ID. */
	return tc_csum_partial(ctx, 18) == 1;
}

#include "dp_tunnel.h"

/* Headers the parser may read, made linear when they are not (the inner
 * frame of a tunnel packet starts up to DP_TUN_MAX_HDR further in). */
#define DP_PULL_LEN (DP_MAX_L4_OFF + 20)

#ifndef EALREADY
#define EALREADY 114
#endif
/* Linux >= 6.3 (uapi headers of older distributions lack it); an older
 * kernel refuses it with -EINVAL, and tc_decap does without. */
#define DP_ADJ_ROOM_DECAP_L3_IPV6 (1ULL << 8)

/* The key of the frame on `port`: the tunnel fields and the inner frame's
 * for a tunnel packet on an underlay (*base = its outer headers' length,
 * Geneve options included; the tunnel port returned), the frame's
 * otherwise. -1: userspace decides. */
static __always_inline int tc_key(struct __sk_buff *ctx, struct dp_port *port,
				  struct dp_scratch *st, __u16 hw_tci, int gso, __u32 *base)
{
	union dp_key *key = &st->key;
	int in_port = port->in_port;

	__builtin_memset(key, 0, sizeof(*key));
	*base = 0;
	if (port->flags & DP_PORT_UNDERLAY) {
		/* A tag in skb metadata is not in the bytes tun_rx_lookup
		 * reads: userspace takes tagged outer frames. */
		if (hw_tci)
			return -1;
		in_port = tun_rx_lookup(ctx, port, key, gso, base);
		if (in_port < 0 || *base > DP_TUN_MAX_HDR)
			return -1;
	}
	if (parse(ctx, key, st, in_port, hw_tci, *base) < 0)
		return -1;
	if (*base) {
		__u32 l3 = RD32(st->l3), l3_off = RD32(st->l3_off), want, have, b = *base;
		__u8 *data = DP_DATA(ctx), *end = DP_DATA_END(ctx), *ip;

		/* An inner VLAN tag: after the decap skb->protocol would still
		 * be the outer IPv4, which bpf_skb_vlan_pop and the kernel's
		 * GSO go by. Userspace (tc_encode refuses such flows). */
		if (key->f.vlan_tci)
			return -1;
		/* A super-frame must be one tunnel packet (UDP_TUNNEL GSO):
		 * the inner IP length covers the rest of the frame. UDP GRO or
		 * fraglist aggregates of several tunnel packets pass the outer
		 * checks but carry the other packets' outer headers inside. */
		if (gso) {
			if (l3_off > DP_MAX_L3_OFF || b > DP_TUN_MAX_HDR)
				return -1;
			ip = data + b + l3_off;
			if (ip + 6 > end)
				return -1;
			have = ctx->len - b - l3_off;
			if (l3 == DP_L3_IPV4)
				want = rd16(ip + 2);
			else if (l3 == DP_L3_IPV6)
				want = rd16(ip + 4) + 40;
			else
				return -1;
			if (want != have)
				return -1;
		}
	}
	return in_port;
}

/* Strip the outer headers of a tunnel packet whose inner frame hit a flow
 * (untagged: tc_key). *plain_ip: the inner frame is IPv4/IPv6 and
 * skb->protocol is the inner one afterwards, so bpf_redirect_peer may take
 * it (inner ARP, or IPv6 before Linux 6.3, leaves through the transmit
 * path, where eth_type_trans sets the protocol). -1 with the frame as it
 * arrived: the helper refused, the caller punts. */
static __always_inline int tc_decap(struct __sk_buff *ctx, struct dp_scratch *st, int gso,
				    __u32 base, int *plain_ip)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
	__u64 flags = BPF_F_ADJ_ROOM_FIXED_GSO;
	__u32 l3 = RD32(st->l3);
	__u8 eth[14], outer[14];
	__s32 shrink;

	asm volatile("" : "+r"(base));
	if (base < DP_TUN_HDR_LEN || base > DP_TUN_MAX_HDR)
		return -1;
	shrink = -(__s32)base;
	if (data + DP_TUN_HDR_LEN + 14 > end || data + base + 14 > end)
		return -1;
	/* The helper removes the outer headers after the outer Ethernet
	 * header (50 bytes plus Geneve options): the inner one takes the
	 * outer one's place first. */
	__builtin_memcpy(outer, data, 14);
	__builtin_memcpy(eth, data + base, 14);
	__builtin_memcpy(data, eth, 14);
	*plain_ip = l3 == DP_L3_IPV4 || l3 == DP_L3_IPV6;
	if (l3 == DP_L3_IPV6) {
		if (!bpf_skb_adjust_room(ctx, shrink, BPF_ADJ_ROOM_MAC,
					 flags | DP_ADJ_ROOM_DECAP_L3_IPV6))
			goto done;
		/* Before 6.3. A super-frame whose protocol is wrong would be
		 * cut as IPv4 wherever it is segmented: userspace. */
		*plain_ip = 0;
		if (gso)
			goto restore;
	}
	if (!bpf_skb_adjust_room(ctx, shrink, BPF_ADJ_ROOM_MAC, flags))
		goto done;
restore:
	data = DP_DATA(ctx);
	end = DP_DATA_END(ctx);
	if (data + 14 > end)
		return -1;
	__builtin_memcpy(data, outer, 14);
	return -1;
done:
	stat_inc(DP_STAT_DECAP);
	return 0;
}

/* The outer UDP checksum of a csum=true tunnel packet just built (UDP at
 * 34, the inner frame at `inner`), as the userspace tunnel port writes it
 * (nicflow_packet::tunnel::encap: summed over the datagram, a 0 sent as
 * 0xffff), in memory order for a native store; -1 on an internal error.
 * DP_CSUM_FULL sums the bytes. DP_CSUM_LCO (the inner TCP/UDP checksum is
 * still CHECKSUM_PARTIAL, so its bytes are not final) uses what a valid
 * inner checksum guarantees, as the kernel's own UDP tunnels do (local
 * checksum offload): the inner L4 segment sums to the complement of its
 * pseudo header, so only the headers up to it are summed. The pre-check
 * chose the mode and made sure it applies. */
static __always_inline __s64 tc_outer_csum(struct __sk_buff *ctx, struct dp_scratch *st,
					   __u32 inner)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
	__u32 ulen = ctx->len - 34, l3_off = RD32(st->l3_off), l4_off = RD32(st->l4_off);
	__s64 sum;
	__u16 c;

	if (data + 42 > end)
		return -1;
	sum = udp4_pseudo(rd32(data + 26), rd32(data + 30), ulen);
	if (sum < 0)
		return -1;
	if (st->tun.csum_mode == DP_CSUM_FULL) {
		sum = csum_bytes(ctx, 34, ulen, sum);
	} else {
		__u8 *ph = st->tun.ph;
		__s64 ps;
		__u8 *ip;
		__u32 n;

		__u64 in = inner, l3o = l3_off;

		asm volatile("" : "+r"(in));
		asm volatile("" : "+r"(l3o));
		if (in > DP_TUN_MAX_HDR || l3o > DP_MAX_L3_OFF || l4_off > DP_MAX_L4_OFF ||
		    l4_off < l3_off)
			return -1;
		in &= 0x7f;
		l3o &= 0xff;
		ip = data + in + l3o;
		__builtin_memset(ph, 0, 40);
		if (RD32(st->l3) == DP_L3_IPV4) {
			if (ip + 20 > end)
				return -1;
			__builtin_memcpy(ph, ip + 12, 8);
			ph[9] = ip[9];
			wr16(ph + 10, rd16(ip + 2) - (ip[0] & 0x0f) * 4);
			ps = bpf_csum_diff(0, 0, (__be32 *)ph, 12, 0);
		} else {
			if (ip + 40 > end)
				return -1;
			__builtin_memcpy(ph, ip + 8, 32);
			wr16(ph + 34, rd16(ip + 4));
			ph[39] = ip[6];
			ps = bpf_csum_diff(0, 0, (__be32 *)ph, 40, 0);
		}
		if (ps < 0)
			return -1;
		n = inner + l4_off - 34;
		sum = csum_bytes(ctx, 34, n, sum);
		if (sum < 0)
			return -1;
		sum += (__u16)~csum_fold((__u64)ps);
	}
	if (sum < 0)
		return -1;
	c = ~csum_fold((__u64)sum);
	return c ? c : 0xffff;
}

/* The tunnel output of a flow: push the outer header the pre-check
 * copied (st->tun) with its Geneve options, patched for this frame (after
 * the flow's rewrites), and the outer UDP checksum of a csum=true port as
 * the pre-check decided. Returns 0 or -1 (frame aborted).
 *
 * A global function: the verifier checks it once on its own rather than
 * once for every state the action loop ends in. All it needs is in the
 * scratch. */
__attribute__((noinline)) int tc_encap(struct __sk_buff *ctx)
{
	__u64 flags = BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 |
		      BPF_F_ADJ_ROOM_ENCAP_L4_UDP | BPF_F_ADJ_ROOM_ENCAP_L2_ETH |
		      BPF_F_ADJ_ROOM_ENCAP_L2(14);
	__u32 zero = 0, olen, push, i;
	struct dp_scratch *st = bpf_map_lookup_elem(&dp_scratch, &zero);
	struct dp_tun_copy *tpl;
	__u8 *data, *end, *eth;
	__u16 sport;
	__s64 sum;
	long r;

	if (!st)
		return -1;
	tpl = &st->tun;
	eth = tpl->eth;
	olen = tpl->olen;
	asm volatile("" : "+r"(olen));
	if (olen > DP_GENEVE_OPT_MAX || (olen & 3))
		return -1;
	push = DP_TUN_HDR_LEN + olen;
	sport = entropy_port(ctx, st, &st->key);
	if (!sport)
		return -1;
	data = DP_DATA(ctx);
	end = DP_DATA_END(ctx);
	if (data + 14 > end)
		return -1;
	__builtin_memcpy(eth, data, 14);
	r = bpf_skb_adjust_room(ctx, push, BPF_ADJ_ROOM_MAC, flags);
	/* Already marked encapsulated (a frame a tunnel device of the sender
	 * built): one level of GSO tunnel is all the kernel keeps, but a
	 * single frame needs no GSO state. */
	if (r == -EALREADY && !tpl->gso)
		r = bpf_skb_adjust_room(ctx, push, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_FIXED_GSO);
	if (r)
		return -1;
	data = DP_DATA(ctx);
	end = DP_DATA_END(ctx);
	if (data + DP_TUN_HDR_LEN + 14 > end)
		return -1;
	__builtin_memcpy(data, tpl->hdr, DP_TUN_HDR_LEN);
	/* Options in 16-byte chunks; the last one may spill into the inner
	 * Ethernet header's place, written next. */
#pragma unroll
	for (i = 0; i < DP_GENEVE_OPT_MAX / 16; i++) {
		if (16 * i >= olen)
			break;
		if (data + DP_TUN_HDR_LEN + 16 * (i + 1) > end)
			return -1;
		__builtin_memcpy(data + DP_TUN_HDR_LEN + 16 * i, tpl->opts + 16 * i, 16);
	}
	asm volatile("" : "+r"(push));
	if (push > DP_TUN_MAX_HDR || data + push + 14 > end)
		return -1;
	__builtin_memcpy(data + push, eth, 14);
	tun_hdr_patch(data, ctx->len - 14, sport, tpl->vni, olen / 4, tpl->crit ? 0x40 : 0);
	if (tpl->csum_mode == DP_CSUM_FULL || tpl->csum_mode == DP_CSUM_LCO) {
		sum = tc_outer_csum(ctx, st, push);
		if (sum < 0)
			return -1;
		data = DP_DATA(ctx);
		end = DP_DATA_END(ctx);
		if (data + 42 > end)
			return -1;
		*(__u16 *)(data + 40) = (__u16)sum;
	}
	/* A CHECKSUM_COMPLETE skb->csum covers what follows the outer
	 * Ethernet header; the helper added the pushed bytes as zeros. Fold
	 * in what was written there (bpf_csum_update changes nothing for
	 * other skbs). */
	sum = csum_bytes(ctx, 14, push, 0);
	if (sum < 0)
		return -1;
	bpf_csum_update(ctx, (__u32)sum);
	stat_inc(DP_STAT_ENCAP);
	stat_inc(DP_STAT_OUTPUT);
	return 0;
}

/* A csum=true tunnel's frame whose inner checksum is CHECKSUM_PARTIAL:
 * the outer checksum can be computed from the headers (DP_CSUM_LCO) only
 * when the inner L4 checksum, once finished, covers the rest of the frame
 * and is a real checksum: TCP, or UDP with a non-zero checksum field and
 * its length the IP payload's; not a fragment; no bytes after the inner
 * IP datagram. 0, or -1 (userspace: the upcall device finishes the sums). */
static __always_inline int tc_lco_ok(struct __sk_buff *ctx, struct dp_scratch *st, __u32 len)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
	__u32 l3_off = RD32(st->l3_off), l4_off = RD32(st->l4_off), l4 = RD32(st->l4), ip_end;
	__u8 *ip, *u;

	if (st->key.f.nw_frag || (l4 != DP_L4_TCP && l4 != DP_L4_UDP))
		return -1;
	if (l3_off > DP_MAX_L3_OFF || l4_off > DP_MAX_L4_OFF)
		return -1;
	ip = data + l3_off;
	if (ip + 20 > end)
		return -1;
	if (RD32(st->l3) == DP_L3_IPV4)
		ip_end = l3_off + rd16(ip + 2);
	else
		ip_end = l3_off + 40 + rd16(ip + 4);
	if (ip_end != len)
		return -1;
	if (l4 == DP_L4_UDP) {
		u = data + l4_off;
		if (u + 8 > end)
			return -1;
		if (rd16(u + 6) == 0 || rd16(u + 4) != len - l4_off)
			return -1;
	}
	return 0;
}

/* Pre-check of a tunnel output (before anything is written or counted):
 * 0 with *out_if / *out_flags of the underlay, or -1 to punt. The inner
 * frame must be one the helper can encapsulate (untagged IPv4/IPv6) and
 * fit the tunnel: each segment of a super-frame, or the frame. For a
 * csum=true port it decides how the outer UDP checksum is written
 * (st->tun.csum_mode): a super-frame gets 0 (segmentation copies the
 * outer header into every segment, and the helper cannot ask for
 * SKB_GSO_UDP_TUNNEL_CSUM); a frame whose inner checksum is pending gets
 * it from the headers (tc_lco_ok), any other frame (its bytes final) is
 * summed over its bytes (at most DP_CSUM_MAX_BYTES of outer datagram). */
static __always_inline int tc_tunnel_precheck(struct __sk_buff *ctx, struct dp_scratch *st,
					      struct dp_flow *flow, __u32 len, __u32 gso_size,
					      __u32 *out_if, __u32 *out_flags)
{
	__u32 l3 = RD32(st->l3), l4 = RD32(st->l4), l4_off = RD32(st->l4_off), seg, slot;
	__u32 n = flow->n_actions, olen;
	struct dp_action *ta;
	struct dp_tx_if *tx;

	if (st->key.f.vlan_tci || (l3 != DP_L3_IPV4 && l3 != DP_L3_IPV6))
		return -1;
	/* The encoder makes the tunnel output the last action. */
	if (n == 0 || n > DP_MAX_ACTIONS)
		return -1;
	ta = &flow->actions[(n - 1) & (DP_MAX_ACTIONS - 1)];
	if (ta->op != DP_OP_TUNNEL_OUTPUT)
		return -1;
	olen = ta->data[DP_TUN_OPT_LEN_AT];
	if (olen > DP_GENEVE_OPT_MAX || (olen & 3))
		return -1;
	if (tun_tx_load(st, flow->out_slot))
		return -1;	/* remote MAC not resolved (yet) */
	/* What the encapsulation needs after the actions ran: the VNI (the
	 * frame's tun_id does not change), the options of the TUN_OPTS
	 * actions right before the output, in order. */
	st->tun.vni = tun_vni(&st->tun, &st->key, ta);
	st->tun.gso = gso_size != 0;
	st->tun.olen = olen;
	st->tun.crit = ta->data[DP_TUN_OPT_CRIT_AT] & 0x40;
	{
		__u32 nch = (olen + 15) / 16, i;

		if (nch > n - 1)
			return -1;
#pragma clang loop unroll(disable)
		for (i = 0; i < DP_GENEVE_OPT_MAX / 16; i++) {
			struct dp_action *o;
			__u32 idx = n - 1 - nch + i;

			if (i >= nch)
				break;
			asm volatile("" : "+r"(idx));
			if (idx >= DP_MAX_ACTIONS)
				return -1;
			o = &flow->actions[idx & (DP_MAX_ACTIONS - 1)];
			if (o->op != DP_OP_TUN_OPTS)
				return -1;
			__builtin_memcpy(st->tun.opts + 16 * i, o->data, 16);
		}
	}
	slot = st->tun.tx_slot;
	tx = bpf_map_lookup_elem(&dp_tx_ports, &slot);
	if (!tx || !tx->ifindex)
		return -1;
	*out_if = tx->ifindex;
	*out_flags = tx->flags;
	if (len + DP_TUN_HDR_LEN + olen - 14 > 0xffff)
		return -1;	/* the outer IP length would not fit */
	if (gso_size) {
		__u8 *data = DP_DATA(ctx);
		__u8 *end = DP_DATA_END(ctx);
		__u32 hl;

		if (l4_off > DP_MAX_L4_OFF || l4_off < 14)
			return -1;
		if (l4 == DP_L4_TCP) {
			__u8 *th = data + l4_off;

			if (th + 20 > end)
				return -1;
			hl = (th[12] >> 4) * 4;
		} else {
			/* UDP super-frames: possibly already a tunnel's (the
			 * sender's own VXLAN), which the helper cannot nest and
			 * which cannot go up any more once the actions ran. */
			return -1;
		}
		seg = l4_off - 14 + hl + gso_size;
	} else {
		seg = len - 14;
	}
	/* Too big: userspace answers with ICMP or drops and counts. */
	if (seg > st->tun.inner_mtu)
		return -1;
	st->tun.csum_mode = DP_CSUM_NONE;
	if (st->tun.flags & DP_TUN_TX_CSUM) {
		int partial;

		if (gso_size) {
			st->tun.csum_mode = DP_CSUM_ZERO;
			return 0;
		}
		/* The probe runs on the EtherType, written back as it was. */
		partial = tc_csum_partial(ctx, 12);
		if (partial < 0)
			return -1;
		if (partial) {
			if (tc_lco_ok(ctx, st, len))
				return -1;
			st->tun.csum_mode = DP_CSUM_LCO;
			return 0;
		}
		if (len + DP_TUN_HDR_LEN + olen - 34 > DP_CSUM_MAX_BYTES)
			return -1;
		st->tun.csum_mode = DP_CSUM_FULL;
	}
	return 0;
}

/* ---- connection set-up in the program (issue 36, `ct_setup_bpf`) --------
 * The daemon sets a TCP connection up in this engine at its SYN
 * (datapath::ct_offload, "set-up in the kernel"): three exact entries
 * composed from cached megaflows, then the SYN sent on. When such a set-up
 * came from cached megaflows without NAT or MAC rewrites, it also writes a
 * *template* for the SYN's input port and EtherType: what those megaflows
 * looked at, as fields of the SYN's key (vmask, and the SYN's values
 * there, vkey), the three entries' mask slots, key TCP flags and values
 * (actions), and where the SYN goes. A later bare SYN that misses and
 * agrees with the template where vmask looks would take the very same
 * megaflows in userspace, so the program builds and inserts the three
 * entries itself (BPF_NOEXIST: an entry already there, another CPU's or
 * a connection's with the same tuple, wins and the SYN goes up, every entry
 * this one inserted deleted again), reports the SYN (its frame) through
 * the dp_ct_events ring buffer, and forwards it. The daemon creates the
 * tracker's connection from the report and takes the entries into its
 * books; it stays the authority (removes them when the connection ends,
 * on a rule change, ...). The ring space is reserved before anything is
 * inserted: with the ring full the SYN goes up instead, so no entry
 * exists that the daemon does not hear of. The daemon removes a template
 * as soon as a flow it came from changes or goes. */
#define DP_CT_EV_FRAME 192	/* longest SYN frame reported (and set up) */

struct dp_ct_tpl_key {
	__u32 in_port;
	__u16 dl_type;
	__u16 pad;	/* 0 */
};

struct dp_ct_tpl {
	__u64 gen;		/* the daemon's id of this template */
	__u32 out_port;		/* in_port of the reply entries */
	__u32 syn_slot;		/* dp_tx_ports slot the SYN leaves by */
	__u32 mask_idx[3];	/* entries: orig, reply, reply SYN-ACK */
	__u16 tcp_flags[3];	/* each entry key's TCP flags */
	__u16 pad;
	__u32 pad2;
	union dp_key vmask;
	union dp_key vkey;	/* the source SYN's key & vmask */
	struct dp_flow entry[3];	/* values: actions, flags, out_slot */
};
_Static_assert(sizeof(struct dp_ct_tpl) == 40 + 224 + 3 * sizeof(struct dp_flow),
	       "dp_ct_tpl layout");

struct dp_ct_event {
	__u64 gen;
	struct dp_flow_key hk[3];
	__u32 in_port;
	__u32 len;
	__u8 frame[DP_CT_EV_FRAME];
};
_Static_assert(sizeof(struct dp_ct_event) == 256, "dp_ct_event layout");

struct dp_ct_scratch {
	union dp_key key;
	struct dp_flow v;
	struct dp_flow_key hk[3];
};

/* dp_ct_stats: set up, ring full (SYN up), lost race or collision (SYN up),
 * template there but not agreeing (SYN up). */
enum { DP_CT_ST_SETUP = 0, DP_CT_ST_RING_FULL, DP_CT_ST_EXISTS, DP_CT_ST_MISMATCH, DP_CT_ST_N };

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	/* Not preallocated: an update replaces the element and frees the old
	 * one after an RCU grace period, so a program that looked a template
	 * up reads it whole even while the daemon rewrites it twice (a
	 * preallocated map reuses the replaced element at the next update:
	 * torn reads, review of ctbpf MUST-FIX 4). */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 256);
	__type(key, struct dp_ct_tpl_key);
	__type(value, struct dp_ct_tpl);
} dp_ct_tpl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);	/* the loader may set it */
} dp_ct_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_ct_scratch);
} dp_ct_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DP_CT_ST_N);
	__type(key, __u32);
	__type(value, __u64);
} dp_ct_stats SEC(".maps");

static __always_inline void ct_stat(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&dp_ct_stats, &idx);

	if (v)
		*v += 1;
}


/* Whether this report wakes the daemon. The ring's default (wake when the
 * reader has caught up) woke it at nearly every set-up, since the daemon
 * drains the ring at once: each wake-up is an irq_work, a self-IPI, i.e. an
 * APIC MSR write, which in a VM traps to the hypervisor (~5.6 us of the
 * sending CPU per connection, 8 % of the machine on the firewall cps
 * benchmark, docs/results/conntrack.md "the wake-up fix"). So the program
 * wakes it only when the unread reports reach an eighth of the ring; below
 * that the daemon reads them at its next round, which comes at the latest
 * CT_EVENTS_WAIT (2 ms) later while it has templates (Bridge::
 * ct_events_wait), and always before it reads a port, so no later packet
 * of a reported connection reaches it before its report. */
static __always_inline __u64 dp_ct_ev_wakeup(void)
{
	__u64 avail = bpf_ringbuf_query(&dp_ct_events, BPF_RB_AVAIL_DATA);
	__u64 mark = bpf_ringbuf_query(&dp_ct_events, BPF_RB_RING_SIZE) / 8;

	/* avail counts this report (reserved). Every report at or above the
	 * mark wakes, not only the one at the crossing: another CPU's report
	 * reserved meanwhile, or a record discarded at the crossing, could
	 * otherwise skip it, and avail only grows until the daemon reads. Once
	 * the daemon drains, avail falls below the mark again. */
	if (avail >= mark)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* A bare TCP SYN (parsed into the scratch) missed: set its connection up
 * from the template of its port and EtherType. Returns the SYN's output
 * (ifindex << 1 | 1 for bpf_redirect_peer), or -1: it goes up as before.
 * A global function: verified once, on its own. */
__attribute__((noinline)) int dp_ct_setup(struct __sk_buff *ctx)
{
	__u32 zero = 0, len, slot, idx, n = 0, i;
	struct dp_scratch *st = bpf_map_lookup_elem(&dp_scratch, &zero);
	struct dp_ct_scratch *cs = bpf_map_lookup_elem(&dp_ct_scratch, &zero);
	struct dp_config *cfg = bpf_map_lookup_elem(&dp_config, &zero);
	struct dp_ct_tpl_key tk = {};
	struct dp_ct_event *ev;
	struct dp_ct_tpl *t;
	struct dp_tx_if *tx;
	union dp_key *k, *o;
	struct dp_mask *m;
	int w, out;

	if (!st || !cs || !cfg)
		return -1;
	k = &st->key;
	if (RD32(st->l4) != DP_L4_TCP || (k->f.tcp_flags & 0x17) != 0x02 || k->f.nw_frag ||
	    k->f.vlan_tci)
		return -1;
	tk.in_port = k->f.in_port;
	tk.dl_type = k->f.dl_type;
	t = bpf_map_lookup_elem(&dp_ct_tpl, &tk);
	if (!t)
		return -1;
	if (!dp_masked_eq(k, &t->vmask, &t->vkey)) {
		ct_stat(DP_CT_ST_MISMATCH);
		return -1;
	}
	len = ctx->len;
	if (len < 14 || len > DP_CT_EV_FRAME)
		return -1;
	slot = t->syn_slot;
	tx = bpf_map_lookup_elem(&dp_tx_ports, &slot);
	if (!tx || !tx->ifindex || tx->ifindex > 0x3fffffff)
		return -1;
	out = (int)(tx->ifindex << 1) | ((tx->flags & DP_TX_PEER) ? 1 : 0);
	ev = bpf_ringbuf_reserve(&dp_ct_events, sizeof(*ev), 0);
	if (!ev) {
		ct_stat(DP_CT_ST_RING_FULL);
		return -1;
	}
	o = &cs->key;
#pragma clang loop unroll(disable)
	for (i = 0; i < 3; i++) {
		__builtin_memcpy(o, k, sizeof(*o));
		if (i) {
			__builtin_memcpy(o->f.dl_dst, k->f.dl_src, 6);
			__builtin_memcpy(o->f.dl_src, k->f.dl_dst, 6);
			o->f.nw_src = k->f.nw_dst;
			o->f.nw_dst = k->f.nw_src;
			__builtin_memcpy(o->f.ipv6_src, k->f.ipv6_dst, 16);
			__builtin_memcpy(o->f.ipv6_dst, k->f.ipv6_src, 16);
			o->f.tp_src = k->f.tp_dst;
			o->f.tp_dst = k->f.tp_src;
			o->f.in_port = t->out_port;
		}
		o->f.tcp_flags = t->tcp_flags[i];
		idx = t->mask_idx[i];
		m = bpf_map_lookup_elem(&dp_masks, &idx);
		if (!m || !m->active)
			goto undo;
		__builtin_memcpy(&cs->v, &t->entry[i], sizeof(cs->v));
		cs->v.packets = 0;
		cs->v.bytes = 0;
		cs->v.used_ns = 0;
		cs->v.tcp_flags = 0;
#pragma unroll
		for (w = 0; w < DP_KEY_WORDS; w++)
			cs->v.key.w[w] = o->w[w] & m->mask.w[w];
		cs->hk[i].mask_idx = idx;
		cs->hk[i].pad = 0;
		cs->hk[i].hash = dp_masked_hash(o, &m->mask, cfg);
		if (bpf_map_update_elem(&dp_flows, &cs->hk[i], &cs->v, BPF_NOEXIST)) {
			ct_stat(DP_CT_ST_EXISTS);
			goto undo;
		}
		n = i + 1;
	}
	len &= 0xff;
	if (len < 14 || len > DP_CT_EV_FRAME)
		goto undo;
	if (bpf_skb_load_bytes(ctx, 0, ev->frame, len))
		goto undo;
	ev->gen = t->gen;
	__builtin_memcpy(ev->hk, cs->hk, sizeof(ev->hk));
	ev->in_port = tk.in_port;
	ev->len = len;
	bpf_ringbuf_submit(ev, dp_ct_ev_wakeup());
	ct_stat(DP_CT_ST_SETUP);
	return out;
undo:
#pragma clang loop unroll(disable)
	for (i = 0; i < 3; i++) {
		if (i >= n)
			break;
		bpf_map_delete_elem(&dp_flows, &cs->hk[i]);
	}
	bpf_ringbuf_discard(ev, 0);
	return -1;
}

/* Profiling builds (issue 33's breakdown; never the shipped object):
 * -DDP_PROF_STOP=n ends a hit early with a redirect to output slot 0, so
 * `nicflow bench progcost --tc-variant` can measure what each stage adds:
 * 0 at entry, 1 after the port and config lookups, 2 after the parse,
 * 3 after the flow hash, 4 after the flow table lookup, 5 after the
 * compare and pre-checks (dp_find) and the output slot, 6 after the
 * counters. */
#ifdef DP_PROF_STOP
#define DP_PROF_AT(n)                                                          \
	do {                                                                   \
		if (DP_PROF_STOP == (n)) {                                     \
			__u32 s0 = 0;                                          \
			struct dp_tx_if *t = bpf_map_lookup_elem(&dp_tx_ports, &s0); \
			return t ? bpf_redirect(t->ifindex, 0) : TC_ACT_SHOT;  \
		}                                                              \
	} while (0)
#else
#define DP_PROF_AT(n) do { } while (0)
#endif

SEC("classifier")
int tc_dp(struct __sk_buff *ctx)
{
	__u32 zero = 0, ifindex = ctx->ingress_ifindex, arg = 0, up, base = 0;
	/* Context fields read once, before any helper runs. */
	__u32 len = ctx->len, gso_segs = ctx->gso_segs, vlan = ctx->vlan_present;
	__u32 gso_size = ctx->gso_size;
	__u32 out_slot = 0, out_if = 0, out_flags = 0;
	__u16 hw_tci = vlan ? (__u16)ctx->vlan_tci | 0x1000 : 0;
	int in_port, plain_ip = 1;
	struct dp_flow *flow;
	struct dp_scratch *st;
	struct dp_config *cfg;
	struct dp_port *port;
	struct dp_tx_if *tx;
	int res, punted;

	DP_PROF_AT(0);
	stat_inc(DP_STAT_RX);
	st = bpf_map_lookup_elem(&dp_scratch, &zero);
	if (!st)
		return TC_ACT_UNSPEC;
	/* The port's entry, copied into the scratch (map memory: every read
	 * of it is a fresh unknown to the verifier, where a stack copy would
	 * carry each branch's refinements into the states it compares). */
	port = &st->port;
	if (dp_port_of(ifindex, port)) {
		/* Not (yet) a port of ours: the next program decides (the
		 * port's own tc_upcall, or the host stack). */
		stat_inc(DP_STAT_NO_PORT);
		return TC_ACT_UNSPEC;
	}
	up = port->upcall_ifindex;
	cfg = bpf_map_lookup_elem(&dp_config, &zero);
	if (!cfg)
		goto to_user;
	DP_PROF_AT(1);
	st->hk.pad = 0;
	in_port = tc_key(ctx, port, st, hw_tci, gso_size != 0, &base);
	if (in_port < 0) {
		/* Headers beyond the linear part (a super-frame's head may hold
		 * only part of them): pull them in and try once more. Only
		 * then: a pull on every frame would copy payload out of the
		 * fragments of every TSO frame. */
		__u32 want = DP_PULL_LEN + ((port->flags & DP_PORT_UNDERLAY) ? DP_TUN_MAX_HDR : 0);

		if (want > len)
			want = len;
		if (DP_DATA(ctx) + want <= DP_DATA_END(ctx) || bpf_skb_pull_data(ctx, want)) {
			stat_inc(DP_STAT_UNPARSED);
			goto to_user;
		}
		in_port = tc_key(ctx, port, st, hw_tci, gso_size != 0, &base);
		if (in_port < 0) {
			stat_inc(DP_STAT_UNPARSED);
			goto to_user;
		}
	}
	DP_PROF_AT(2);
#if defined(DP_PROF_STOP) && (DP_PROF_STOP == 3 || DP_PROF_STOP == 4)
	{
		__u32 m0 = 0;
		struct dp_mask *m = bpf_map_lookup_elem(&dp_masks, &m0);

		if (!m)
			goto to_user;
		st->hk.mask_idx = 0;
		st->hk.hash = dp_masked_hash(&st->key, &m->mask, cfg);
		if (DP_PROF_STOP == 4 && !bpf_map_lookup_elem(&dp_flows, &st->hk))
			goto to_user;
		DP_PROF_AT(DP_PROF_STOP);
	}
#endif
	flow = dp_find(st, cfg, &punted);
	if (!flow) {
		if (punted)
			goto punt;
		/* A bare TCP SYN (its flags in the key): set up from a template
		 * if there is one (dp_ct_setup), then forwarded. */
		if (!base && !vlan && (st->key.f.tcp_flags & 0x17) == 0x02 &&
		    st->key.f.nw_proto == 6) {
			int o = dp_ct_setup(ctx);

			if (o > 0) {
				if ((o & 1) && plain_ip)
					return bpf_redirect_peer((__u32)o >> 1, 0);
				return bpf_redirect((__u32)o >> 1, 0);
			}
		}
		goto to_user;
	}
	/* A per-packet select: the frame runs, and is counted by, its chosen
	 * bucket's flow (userspace sums the buckets' counters). */
	if (flow->flags & DP_F_SELECT) {
		flow = dp_select_bucket(st, flow);
		if (!flow)
			goto punt;
	}
	if (flow->flags & DP_F_TUNNEL) {
		/* Tunnel to tunnel and tags in skb metadata: userspace (the
		 * encoder refuses the first). */
		if (base || vlan)
			goto punt;
		if (tc_tunnel_precheck(ctx, st, flow, len, gso_size, &out_if, &out_flags))
			goto punt;
	} else if (flow->flags & DP_F_OUTPUT) {
		/* The output slot is read once, here: the redirect below uses
		 * what the pre-check saw. */
		out_slot = flow->out_slot;
		tx = bpf_map_lookup_elem(&dp_tx_ports, &out_slot);
		if (!tx || !tx->ifindex)
			goto punt;
		out_if = tx->ifindex;
		out_flags = tx->flags;
	}
	DP_PROF_AT(5);

	/* A GSO super-frame is as many packets as it will be segments; its
	 * bytes are the super-frame's (the inner frame's, for a tunnel
	 * packet). A tag in skb metadata is counted as the 4 bytes it is on
	 * the wire. */
	if (base && tc_decap(ctx, st, gso_size != 0, base, &plain_ip))
		goto punt;
	{
		__u64 segs = gso_segs > 1 ? gso_segs : 1, bytes = len - base + (vlan ? 4 : 0);

		dp_count(cfg, st, flow, segs, bytes);
		DP_PROF_AT(6);
		res = dp_exec(ctx, st, flow, &arg, segs, bytes);
	}
	if (res == DP_RES_OUTPUT) {
		/* The encoder makes OUTPUT the flow's out_slot, always. */
		if (arg != out_slot || !out_if) {
			stat_inc(DP_STAT_ABORTED);
			return TC_ACT_SHOT;
		}
		if ((out_flags & DP_TX_PEER) && plain_ip)
			return bpf_redirect_peer(out_if, 0);
		return bpf_redirect(out_if, 0);
	}
	if (res == DP_RES_TUNNEL && arg < DP_MAX_ACTIONS && out_if) {
		if (tc_encap(ctx) == 0) {
			if (out_flags & DP_TX_PEER)
				return bpf_redirect_peer(out_if, 0);
			return bpf_redirect(out_if, 0);
		}
		stat_inc(DP_STAT_ABORTED);
	}
	return TC_ACT_SHOT;

punt:
	stat_inc(DP_STAT_PUNT);
to_user:
	if (up)
		return bpf_redirect(up, 0);
	return TC_ACT_UNSPEC;
}

char _license[] SEC("license") = "GPL";
