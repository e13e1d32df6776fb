// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * dp_exec.h: the masked flow lookup, the pre-checks and the action loop
 * shared by xdp_dp.c and tc_dp.c (see dp_core.h). Included after the
 * program defined its VLAN actions (act_push_vlan, act_pop_vlan,
 * act_set_vlan_tci), the only header rewrites that move bytes and so
 * depend on the attach point. The loop returns what the program must do
 * with the frame; redirects are the program's.
 */

/* What the action list asked for. */
enum {
	DP_RES_OUTPUT = 0,	/* *arg = output slot */
	DP_RES_DROP,		/* counted as a drop already */
	DP_RES_ABORT,		/* an action failed after writes began */
	DP_RES_TUNNEL,		/* *arg = index of the TUNNEL_OUTPUT action */
};

/* The flow hash of `key` masked by `mask` (dp_hash_word over the
 * non-zero masked words).
 * Global functions, these three: the verifier checks each once on its
 * own, instead of once per path into the mask loop times every iteration
 * of it (the program stayed under the verifier's limit only so). */
__attribute__((noinline)) __u64 dp_masked_hash(const union dp_key *key, const union dp_key *mask,
					       const struct dp_config *cfg)
{
	__u64 h = 0;
	int w;

	if (!key || !mask || !cfg)
		return 0;
#pragma unroll
	for (w = 0; w < DP_KEY_WORDS; w++) {
		__u64 v = key->w[w] & mask->w[w];

		if (v)
			h += dp_hash_word(v, cfg->seed[w]);
	}
	return h;
}

/* 1 when `key` masked by `mask` is `stored` (a flow's masked key). */
__attribute__((noinline)) int dp_masked_eq(const union dp_key *key, const union dp_key *mask,
					   const union dp_key *stored)
{
	__u64 diff = 0;
	int w;

	if (!key || !mask || !stored)
		return 0;
#pragma unroll
	for (w = 0; w < DP_KEY_WORDS; w++)
		diff |= (key->w[w] & mask->w[w]) ^ stored->w[w];
	return diff == 0;
}

/* The mask-hint hash of the whole key. A light mix is enough for a hint (a
 * collision costs a probe, never a wrong flow). tcp_flags (the top 16
 * bits of word 4) are left out: every segment of a connection shares one
 * hint. */
__attribute__((noinline)) __u64 dp_hint_hash(const union dp_key *key,
					     const struct dp_config *cfg)
{
	__u64 h = 0;
	int w;

	if (!key || !cfg)
		return 0;
#pragma unroll
	for (w = 0; w < DP_KEY_WORDS; w++) {
		__u64 v = (w == 4 ? key->w[w] & 0x0000ffffffffffffULL : key->w[w]) ^ cfg->seed[w];

		v *= DP_HASH_MUL;
		h += v ^ (v >> 32);
	}
	return h;
}

/* The flow of `key` under mask slot i, or NULL: the flow hash of the
 * masked key, one lookup of 16 bytes, and on a hit the masked key
 * compared with the flow's stored one. */
static __always_inline struct dp_flow *dp_probe(union dp_key *key, struct dp_flow_key *hk,
						struct dp_config *cfg, __u32 i)
{
	struct dp_flow *flow;
	struct dp_mask *m;
	__u32 idx = i;

	m = bpf_map_lookup_elem(&dp_masks, &idx);
	if (!m || !m->active)
		return 0;
	hk->mask_idx = i;
	hk->hash = dp_masked_hash(key, &m->mask, cfg);
	flow = bpf_map_lookup_elem(&dp_flows, hk);
	if (!flow || !dp_masked_eq(key, &m->mask, &flow->key))
		return 0;
	return flow;
}

/* Masked lookup; any hit is the frame's flow (the slow path's megaflows
 * do not overlap for a given packet). With one mask slot in use, that
 * one. With more, the mask-hint cache first: a per-CPU direct-mapped
 * table from the hash of the whole (unmasked) key to the mask slot the
 * last frame with that hash hit, as OVS's kernel module caches masks by
 * skb hash. A stale or colliding hint costs one probe; a miss there scans
 * the slots in order and records the one that hit. */
static __always_inline struct dp_flow *dp_lookup(union dp_key *key, struct dp_flow_key *hk,
						 struct dp_config *cfg)
{
	struct dp_mask_hint *hint = 0;
	__u32 i, n = cfg->n_masks, tag = 0;
	struct dp_flow *flow;

	if (n > 1) {
		__u64 hf = dp_hint_hash(key, cfg);
		__u32 slot;

		slot = hf & (DP_MASK_HINTS - 1);
		tag = (__u32)(hf >> 32) | 1;	/* never 0: an empty entry */
		hint = bpf_map_lookup_elem(&dp_mask_hint, &slot);
		if (hint && hint->tag == tag && hint->mask_idx < n) {
			flow = dp_probe(key, hk, cfg, hint->mask_idx);
			if (flow)
				return flow;
		}
	}
#pragma clang loop unroll(disable)
	for (i = 0; i < DP_MAX_MASKS_CAP; i++) {
		if (i >= n)
			break;
		flow = dp_probe(key, hk, cfg, i);
		if (flow) {
			if (hint) {
				hint->tag = tag;
				hint->mask_idx = i;
			}
			return flow;
		}
	}
	return 0;
}

static __always_inline int dp_precheck(struct dp_scratch *st, union dp_key *key,
				       struct dp_flow *flow);

/* The parsed frame's flow, pre-checked: NULL on a miss (counted) or, with
 * *punt set, when a pre-check failed (the caller counts the punt). */
static __always_inline struct dp_flow *dp_find(struct dp_scratch *st, struct dp_config *cfg,
					       int *punt)
{
	struct dp_flow *flow = dp_lookup(&st->key, &st->hk, cfg);

	*punt = 0;
	if (!flow) {
		stat_inc(DP_STAT_MISS);
		return 0;
	}
	if (dp_precheck(st, &st->key, flow)) {
		*punt = 1;
		return 0;
	}
	return flow;
}

/* The pre-checks that do not depend on the attach point: anything that
 * would keep the kernel from finishing the actions exactly as userspace
 * would sends the untouched frame up. 0, or -1 to punt. */
static __always_inline int dp_precheck(struct dp_scratch *st, union dp_key *key,
				       struct dp_flow *flow)
{
	__u8 flags = flow->flags;

	if ((flags & DP_F_DEC_TTL) && (RD32(st->l3) == DP_L3_IPV4 || RD32(st->l3) == DP_L3_IPV6) &&
	    key->f.nw_ttl <= 1)
		return -1;
	/* SCTP needs a CRC32c, ICMP type/code rewrites (userspace's, in the
	 * same tp fields) are not done here. */
	if ((flags & DP_F_SET_TP) && (RD32(st->l4) == DP_L4_SCTP || RD32(st->l4) == DP_L4_ICMP ||
				       RD32(st->l4) == DP_L4_ICMPV6))
		return -1;
	return 0;
}

/* The coarse clock (CLOCK_MONOTONIC_COARSE), read once per jiffy per CPU:
 * bpf_jiffies64 (a load of jiffies behind the helper call) tells whether
 * the tick moved since this CPU last read bpf_ktime_get_coarse_ns, whose
 * value only changes at a tick anyway. The clock helper cost ~15-30 ns a
 * hit (issue 33: `bench progcost`, a -DDP_PROF_NO_CLOCK build); the
 * cached value is at most a tick behind the coarse clock (the tick moves
 * jiffies just before the timekeeper), two behind real time: nothing for
 * idle timeouts in seconds. */
static __always_inline __u64 dp_coarse_now(struct dp_scratch *st)
{
	__u64 j = bpf_jiffies64();

	if (st->clk_jiffies != j) {	/* 0 at first: jiffies never is */
		st->clk_jiffies = j;
		st->clk_ns = bpf_ktime_get_coarse_ns();
	}
	return st->clk_ns;
}

/* A hit: the flow's counters (`packets` frames of `bytes` bytes). */
static __always_inline void dp_count(struct dp_config *cfg, struct dp_scratch *st,
				     struct dp_flow *flow, __u64 packets, __u64 bytes)
{
	union dp_key *key = &st->key;

	stat_inc(DP_STAT_HIT);
	if (!(cfg->flags & DP_CFG_NO_COUNTERS)) {
		__sync_fetch_and_add(&flow->packets, packets);
		__sync_fetch_and_add(&flow->bytes, bytes);
	}
#ifndef DP_PROF_NO_CLOCK	/* profiling builds only (tc_dp.c, DP_PROF_STOP) */
	{
		/* The store is skipped while the tick has not moved, so most
		 * packets leave the flow's line clean. */
		__u64 now = dp_coarse_now(st);

		if (flow->used_ns != now)
			flow->used_ns = now;
	}
#endif
	if (key->f.tcp_flags & ~flow->tcp_flags)
		__sync_fetch_and_or(&flow->tcp_flags_word,
				    dp_tcp_flags_word(key->f.tcp_flags));
}

/* A dscp_remark band fired: raise the AF drop precedence (RFC 2597: AFxy
 * is DSCP 8x+2y, x 1-4, y 1-3) by prec, at most AFx3, ECN kept, as
 * datapath::meter::remark_dscp. Other code points are left alone. */
static __always_inline int act_meter_remark(DP_CTX *ctx, struct dp_scratch *st, __u32 prec)
{
	__u8 *data = DP_DATA(ctx);
	__u8 *end = DP_DATA_END(ctx);
	__u32 l3 = RD32(st->l3_off), kind = RD32(st->l3);
	__u8 *ip, tos, dscp, x, y;

	if (kind != DP_L3_IPV4 && kind != DP_L3_IPV6)
		return 0;
	if (l3 > DP_MAX_L3_OFF)
		return -1;
	ip = data + l3;
	if (ip + 2 > end)
		return -1;
	tos = kind == DP_L3_IPV4 ? ip[1] : (__u8)((ip[0] << 4) | (ip[1] >> 4));
	dscp = tos >> 2;
	x = dscp >> 3;
	y = (dscp >> 1) & 3;
	if (x < 1 || x > 4 || y < 1 || (dscp & 1))
		return 0;
	y = y + prec > 3 ? 3 : y + prec;
	dscp = (x << 3) | (y << 1);
	if (dscp == tos >> 2)
		return 0;
	return act_ip_byte(ctx, st, DP_OP_SET_TOS, (__u8)((dscp << 2) | (tos & 3)));
}

/* Meter one frame (`packets` segments of `bytes` bytes) through meter id:
 * refill every band for the time since the meter's last use, take the
 * frame's volume from each band that has it; of those that had not, the
 * band with the highest rate fires. Returns -1 (drop), 0 (pass) or
 * 1 + prec_level (remark). A meter missing from the map (being deleted:
 * its flows go at the next revalidation) passes, as in userspace. */
static __always_inline int dp_meter(__u32 id, __u64 packets, __u64 bytes)
{
	struct dp_meter *m = bpf_map_lookup_elem(&dp_meters, &id);
	__u64 now = bpf_ktime_get_ns(), dt, vol, fired_rate = 0;
	__u32 b, n, kind = 0, prec = 0;
	int fired = -1;

	if (!m)
		return 0;
	bpf_spin_lock(&m->lock);
	dt = now > m->last_ns ? now - m->last_ns : 0;
	if (dt)
		m->last_ns = now;
	n = m->n_bands;
	vol = m->pktps ? packets * 1000000000ULL : bytes * 8000000ULL;
	m->packets_in += packets;
	m->bytes_in += bytes;
#pragma unroll
	for (b = 0; b < DP_METER_BANDS; b++) {
		struct dp_meter_band *band = &m->bands[b];

		if (b >= n)
			break;
		if (dt >= band->fill_ns)
			band->bucket = band->max;
		else if (dt) {
			__u64 v = band->bucket + dt * band->rate;

			band->bucket = v < band->max ? v : band->max;
		}
		if (band->bucket >= vol) {
			band->bucket -= vol;
		} else if (fired < 0 || band->rate > fired_rate) {
			fired = b;
			fired_rate = band->rate;
			kind = band->kind;
			prec = band->prec_level;
		}
	}
	if (fired >= 0 && fired < DP_METER_BANDS) {
		m->bands[fired].packets += packets;
		m->bands[fired].bytes += bytes;
	}
	bpf_spin_unlock(&m->lock);
	if (fired < 0)
		return 0;
	return kind == DP_METER_DROP ? -1 : 1 + (int)prec;
}

/* A select flow's bucket for this frame: advance the group's per-CPU
 * rotation (the same arithmetic as userspace's datapath::select) and
 * return the bucket's index, ~0 when the action is not what the encoder
 * writes. A global function, verified once on its own: inlined, its
 * weighted loop's paths multiplied the program's past the verifier's
 * budget. */
__attribute__((noinline)) __u32 dp_select_pick(struct dp_flow *flow)
{
	struct dp_select_weights *w;
	struct dp_select_state *s;
	struct dp_action *a;
	__u32 slot, n, b = 0, j;
	__s64 total = 0, best_v = 0;
	int found = 0;

	if (!flow)
		return ~0U;
	a = &flow->actions[0];
	if (flow->n_actions != 1 || a->op != DP_OP_SELECT)
		return ~0U;
	slot = a->arg32;
	n = a->arg16 >> 8;
	if (n == 0 || n > DP_SELECT_MAX)
		return ~0U;
	s = bpf_map_lookup_elem(&dp_select, &slot);
	if (!s)
		return ~0U;
	if ((a->arg16 & 0xff) == DP_SEL_RR) {
		b = s->next % n;
		s->next++;
		return b;
	}
	w = bpf_map_lookup_elem(&dp_select_w, &slot);
	if (!w)
		return ~0U;
#pragma unroll
	for (j = 0; j < DP_SELECT_MAX; j++) {
		__s64 wj;

		if (j >= n)
			break;
		wj = w->w[j];
		total += wj;
		s->cur[j] += wj;
		if (wj > 0 && (!found || s->cur[j] > best_v)) {
			b = j;
			best_v = s->cur[j];
			found = 1;
		}
	}
	s->cur[b & (DP_SELECT_MAX - 1)] -= total;
	return b;
}

/* The flow a select flow's frame runs: its chosen bucket's, a flow of its
 * own in dp_flows under the select flow's key with pad = 1 + bucket (the
 * flow's own actions, then the bucket's: what userspace runs for that
 * choice). The same map, so the verifier sees the same kind of pointer
 * on both paths. NULL: the frame goes up untouched. */
static __always_inline struct dp_flow *dp_select_bucket(struct dp_scratch *st,
							struct dp_flow *flow)
{
	__u32 b = dp_select_pick(flow);

	if (b >= DP_SELECT_MAX)
		return 0;
	/* The lookup key in the scratch (map memory, no stack state for the
	 * verifier to tell apart from the other path's). */
	st->hk.pad = 1 + b;
	return bpf_map_lookup_elem(&dp_flows, &st->hk);
}

/* Run the flow's actions up to the first that ends the frame; `packets`
 * and `bytes` are what dp_count counted (the frame's size for meters). */
static __always_inline int dp_exec(DP_CTX *ctx, struct dp_scratch *st, struct dp_flow *flow,
				   __u32 *arg, __u64 packets, __u64 bytes)
{
	__u32 i;

	if (flow->n_actions && flow->actions[0].op == DP_OP_METER) {
		int v = dp_meter(flow->actions[0].arg32, packets, bytes);

		if (v < 0) {
			stat_inc(DP_STAT_DROP);
			stat_inc(DP_STAT_DROP_REASON + DP_DROP_METER);
			return DP_RES_DROP;
		}
		if (v > 0 && act_meter_remark(ctx, st, (__u32)v - 1) < 0) {
			stat_inc(DP_STAT_ABORTED);
			return DP_RES_ABORT;
		}
	}

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
			*arg = a->arg32;
			return DP_RES_OUTPUT;
		case DP_OP_DROP:
			stat_inc(DP_STAT_DROP);
			stat_inc(DP_STAT_DROP_REASON +
				 (a->arg16 < DP_DROP_REASONS ? a->arg16 : DP_DROP_REASONS - 1));
			return DP_RES_DROP;
		case DP_OP_TUNNEL_OUTPUT:
			*arg = i;
			return DP_RES_TUNNEL;
		case DP_OP_METER:
			break;	/* ran above, before the loop */
		case DP_OP_TUN_OPTS:
			break;	/* read by the tunnel output */
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
			r = act_set_vlan_tci(ctx, st, a->arg16);
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
			return DP_RES_ABORT;
		}
	}
	/* No output: the frame ends here, as the userspace leftover buffer.
	 * Only an empty action list is a drop by policy there. */
	stat_inc(DP_STAT_DROP);
	if (flow->n_actions == 0)
		stat_inc(DP_STAT_DROP_POLICY);
	return DP_RES_DROP;
}
