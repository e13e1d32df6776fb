// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * dp_tunnel.h: VXLAN/Geneve pieces shared by xdp_dp.c and tc_dp.c (see
 * dp_core.h): the checks a received tunnel packet must pass before the
 * kernel may decapsulate it (the same ones nicflow_packet::tunnel::parse
 * makes), the outer UDP source port (entropy) and the per-frame patch of
 * the 50-byte outer header userspace prepared. How bytes are pushed and
 * pulled is the attach point's (bpf_xdp_adjust_head vs
 * bpf_skb_adjust_room).
 *
 * The including file defines, besides what dp_core.h asks for:
 *   dp_load_bytes(ctx, off, buf, n)     bpf_xdp_load_bytes / bpf_skb_load_bytes
 *   dp_outer_csum_trusted(ctx, gso)     non-zero when the frame's metadata
 *                                       vouches for its outer UDP checksum
 *                                       (XDP: never; TC: see tc_dp.c)
 */

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

/* Most bytes csum_bytes sums (a frame of the underlay's 1500-byte MTU
 * and then some; longer: userspace). */
#define DP_CSUM_MAX_BYTES 2044

/* Where csum_bytes copies the bytes it sums (per CPU): one copy and at
 * most four bpf_csum_diff calls (512 bytes each at most) whatever the
 * length, so that the verifier sees a handful of paths per use, not one
 * per combination of chunk sizes; bpf_*_load_bytes also reads the
 * fragments of a nonlinear skb or a multi-buffer frame. */
struct dp_csum_buf {
	__u8 b[DP_CSUM_MAX_BYTES + 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_csum_buf);
} dp_csum_buf SEC(".maps");

/* The one's-complement sum (32-bit, unfolded, added to `seed`) of the `n`
 * bytes at `off`, zero-padded to a multiple of 4; the same 16-bit sum as
 * checksum::checksum's when `off` is even. -1 when the frame is shorter
 * or n is above DP_CSUM_MAX_BYTES. */
static __always_inline __s64 csum_bytes(DP_CTX *ctx, __u32 off, __u32 n, __s64 seed)
{
	__u64 done = 0, n4, c;
	__u32 zero = 0, i;
	struct dp_csum_buf *b = bpf_map_lookup_elem(&dp_csum_buf, &zero);
	__s64 sum = seed;

	if (!b)
		return -1;
	if (n == 0)
		return seed;
	if (n > DP_CSUM_MAX_BYTES)
		return -1;
	/* Opaque, then masked: the length the helper gets is the register
	 * the verifier saw bounded (the compiler may otherwise pass a
	 * 64-bit form of it it never checked). */
	asm volatile("" : "+r"(n));
	n &= 0x7ff;
	if (n == 0 || n > DP_CSUM_MAX_BYTES)
		return -1;
	if (dp_load_bytes(ctx, off, b->b, n))
		return -1;
	b->b[n] = 0;
	b->b[n + 1] = 0;
	b->b[n + 2] = 0;
	n4 = ((__u64)n + 3) & 0xffc;
#pragma clang loop unroll(disable)
	for (i = 0; i < 4; i++) {
		if (done >= n4)
			break;
		c = n4 - done;
		if (c > 512)
			c = 512;
		asm volatile("" : "+r"(c));
		asm volatile("" : "+r"(done));
		if (c > 512 || done > 3 * 512)
			return -1;
		c &= 0x3fc;
		sum = bpf_csum_diff(0, 0, (__be32 *)(b->b + done), c, (__u32)sum);
		if (sum < 0)
			return -1;
		done += c;
	}
	return sum;
}

/* The IPv4 UDP pseudo header (src, dst, protocol 17, ulen) summed. */
static __always_inline __s64 udp4_pseudo(__u32 src, __u32 dst, __u32 ulen)
{
	__u8 pseudo[12] __attribute__((aligned(4)));

	wr32(pseudo, src);
	wr32(pseudo + 4, dst);
	pseudo[8] = 0;
	pseudo[9] = 17;
	wr16(pseudo + 10, ulen);
	return bpf_csum_diff(0, 0, (__be32 *)pseudo, 12, 0);
}

/* The outer UDP checksum of a linear IPv4 tunnel packet (UDP at offset
 * 34, `ulen` bytes to the end of the frame) is right: the one's-complement
 * sum of the pseudo header and the datagram is 0xffff, the test
 * checksum::l4_checksum_ipv4 makes in userspace. */
static __always_inline int udp4_csum_ok(DP_CTX *ctx, __u32 src, __u32 dst, __u32 ulen)
{
	__s64 sum = udp4_pseudo(src, dst, ulen);

	/* Jumbo: userspace. */
	if (sum < 0)
		return 0;
	sum = csum_bytes(ctx, 34, ulen, sum);
	if (sum < 0)
		return 0;
	return csum_fold((__u64)sum) == 0xffff;
}

#ifdef DP_TC
/* Geneve options as the userspace tunnel port reads them through the
 * port's TLV map (port::tunnel's dispatch): a 4-byte option the map names
 * gives tun_metadata<slot> its value (the last one wins), any other option
 * is ignored unless it is critical, which userspace drops (and counts).
 * `olen` option bytes at offset 50; the block must be whole, each TLV
 * inside it, and an inner Ethernet header after it (userspace's checks).
 * The map is the scratch's copy of the port's (st->tlv). 0 with
 * st->key.f.tun_md0 set, or -1: userspace decides (a malformed block, an
 * unknown critical option, more than DP_GENEVE_OPT_MAX bytes). Slot 0 is
 * the key's tun_md0; options mapped to other slots are known (not
 * dropped) but not in the key: no kernel flow matches them (the encoder
 * refuses).
 *
 * A global function: the verifier checks it once, on its own, instead of
 * once per state of the caller, and the caller goes on with one state
 * whatever the walk found. */
__attribute__((noinline)) int tun_geneve_opts(struct __sk_buff *ctx, __u32 olen)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
	__u32 zero = 0, off = 0, i, j, flen = ctx->len;
	struct dp_scratch *st = bpf_map_lookup_elem(&dp_scratch, &zero);
	__u64 n_tlv, md0 = 0;

	if (!st)
		return -1;
	n_tlv = st->n_tlv;
	if (olen > DP_GENEVE_OPT_MAX || flen < DP_TUN_HDR_LEN + olen + 14)
		return -1;
	/* At least 4 bytes per option: 16 steps cover 64 bytes. The match
	 * is arithmetic, without branches (x == 0 is ((x - 1) >> 63) for x
	 * below 2^32), so that each option leaves the verifier one path. */
#pragma clang loop unroll(disable)
	for (i = 0; i < DP_GENEVE_OPT_MAX / 4; i++) {
		__u64 dlen, known = 0, slot0 = 0, v, take, sel;
		__u8 *o;

		if (off >= olen)
			break;
		asm volatile("" : "+r"(off));
		if (off > DP_GENEVE_OPT_MAX)
			return -1;
		o = data + DP_TUN_HDR_LEN + off;
		if (o + 8 > end)
			return -1;
		dlen = (o[3] & 0x1f) * 4;
		if (off + 4 + dlen > olen)
			return -1;	/* a TLV past the block: userspace's error */
		/* Which map entry names it: (class, type) is in a map once
		 * (the TLV table and tlv_map refuse duplicates), so any match
		 * is userspace's first. */
		v = ((__u64)rd16(o) << 8) | o[2];
#pragma clang loop unroll(disable)
		for (j = 0; j < DP_TLV_MAX; j++) {
			__u64 e = ((__u64)st->tlv[j].opt_class << 8) | st->tlv[j].type;
			__u64 m = (((__u64)j - n_tlv) >> 63) & (((e ^ v) - 1) >> 63);

			known |= m;
			slot0 |= m & (((__u64)st->tlv[j].slot - 1) >> 63);
		}
		take = known & (((dlen ^ 4) - 1) >> 63);
		if (!take && (o[2] & 0x80))
			return -1;	/* unknown critical option: userspace drops */
		sel = -(take & slot0);
		md0 = (rd32(o + 4) & sel) | (md0 & ~sel);
		off += 4 + dlen;
	}
	st->key.f.tun_md0 = (__u32)md0;
	return off == olen ? 0 : -1;
}
#endif

/* A frame on an underlay: if it is a well-formed tunnel packet for one of
 * dp_tun_rx's endpoints that userspace would accept exactly as here, fill
 * the key's tunnel fields and return the tunnel port; otherwise -1
 * (userspace decides and counts). The frame leaves as it came (TC's
 * checksum probe writes the byte it changed back). */
/* `gso`: a TC super-frame, whose segments (not the whole) fit the MTU.
 * *hdr_len: the outer headers' length (DP_TUN_HDR_LEN plus the Geneve
 * options), where the inner frame starts. */
static __always_inline int tun_rx_lookup(DP_CTX *ctx, struct dp_port *port,
					 union dp_key *key, int gso, __u32 *hdr_len)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
	__u64 flen = dp_len(ctx);
	struct dp_tun_rx_key k = {};
	struct dp_tun_rx *ep;
	__u8 *ip, *udp, *t;
	__u16 flags = 8;	/* TUN_F_KEY */
	__u32 vni, olen = 0;
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
	if (!gso && flen - 14 > port->mtu)
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
		/* Version 0, Ethernet payload. */
		if ((t[0] & 0xc0) || rd16(t + 2) != 0x6558)
			return -1;
		olen = (t[0] & 0x3f) * 4;
#ifdef DP_TC
		if (olen) {
			/* The walk reads the map from the scratch (whose key
			 * this is: the one per-CPU entry). */
			__u32 zero = 0;
			struct dp_scratch *sc = bpf_map_lookup_elem(&dp_scratch, &zero);

			if (!sc)
				return -1;
			__builtin_memcpy(sc->tlv, ep->tlv, sizeof(ep->tlv));
			sc->n_tlv = ep->n_tlv;
			if (tun_geneve_opts(ctx, olen))
				return -1;
		} else if (t[1] & 0x40) {
			return -1;	/* C bit, no options: userspace drops */
		}
#else
		/* XDP: no options (userspace walks them), no critical bit. */
		if (olen || (t[1] & 0x40))
			return -1;
#endif
		if (t[1] & 0x80)
			flags |= 1;	/* TUN_F_OAM */
	}
	/* Checked after the endpoint lookup so that no other host's
	 * traffic costs a pass over the frame. */
	if (rd16(udp + 6) != 0) {
		/* (Packet pointers are stale past this point: the TC check
		 * may call helpers that can move the data.) */
		if (!dp_outer_csum_trusted(ctx, gso) &&
		    !udp4_csum_ok(ctx, k.remote, k.local, flen - 34))
			return -1;	/* bad or not checkable here: userspace */
		flags |= 4;	/* TUN_F_CSUM */
	}
	key->f.tun_id = vni;
	key->f.tun_src = k.remote;
	key->f.tun_dst = k.local;
	key->f.tun_flags = flags;
	/* The options' length read afresh: the walk's bounds on it would
	 * otherwise give the rest of the program one verifier state per
	 * option count. */
	olen = 0;
	if (ep->kind != DP_TUN_VXLAN) {
		data = DP_DATA(ctx);
		end = DP_DATA_END(ctx);
		if (data + DP_TUN_HDR_LEN > end)
			return -1;
		olen = (data[42] & 0x3f) * 4;
		asm volatile("" : "+r"(olen));
		if (olen > DP_GENEVE_OPT_MAX)
			return -1;
	}
	*hdr_len = DP_TUN_HDR_LEN + olen;
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
static __always_inline __u16 entropy_port(DP_CTX *ctx, struct dp_scratch *st,
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


/* The VNI a TUNNEL_OUTPUT action sends with (DP_TUN_VNI_*). */
static __always_inline __u32 tun_vni(const struct dp_tun_copy *tpl, union dp_key *key,
				     struct dp_action *a)
{
	__u32 vni;

	if (a->arg16 == DP_TUN_VNI_ACTION)
		vni = *(__u32 *)a->data;
	else if (a->arg16 == DP_TUN_VNI_KEY)
		vni = (__u32)key->f.tun_id;
	else
		vni = ((__u32)tpl->hdr[46] << 16) | ((__u32)tpl->hdr[47] << 8) | tpl->hdr[48];
	return vni & 0xffffff;
}

/* Patch the 50-byte outer header at h for an outer IP packet of ip_len
 * bytes: IP total length and header checksum, UDP source port and length,
 * VNI, and a Geneve header's option length and C bit (`opt0`, `opt1`: 0
 * without options). */
static __always_inline void tun_hdr_patch(__u8 *h, __u32 ip_len, __u16 sport, __u32 vni,
					  __u8 opt0, __u8 opt1)
{
	__u8 *ip = h + 14, *udp = ip + 20;

	udp[8] |= opt0;
	udp[9] |= opt1;

	wr16(ip + 2, ip_len);
	wr16(ip + 10, 0);
	wr16(ip + 10, ipv4_hdr_csum(ip, 1));
	wr16(udp, sport);
	wr16(udp + 4, ip_len - 20);
	udp[12] = vni >> 16;
	udp[13] = vni >> 8;
	udp[14] = vni;
}

/* Copy tunnel slot `slot`'s header into the scratch under the entry's
 * lock (userspace rewrites it in place). 0, or -1 when the frame must go
 * to userspace: no such slot, or the remote's MAC is not resolved yet. */
static __always_inline int tun_tx_load(struct dp_scratch *st, __u32 slot)
{
	struct dp_tun_tx *tpl = bpf_map_lookup_elem(&dp_tun_tx, &slot);

	if (!tpl)
		return -1;
	bpf_spin_lock(&tpl->lock);
	st->tun.valid = tpl->valid;
	st->tun.tx_slot = tpl->tx_slot;
	st->tun.inner_mtu = tpl->inner_mtu;
	st->tun.flags = tpl->flags;
	__builtin_memcpy(st->tun.hdr, tpl->hdr, DP_TUN_HDR_LEN);
	bpf_spin_unlock(&tpl->lock);
	return st->tun.valid ? 0 : -1;
}
