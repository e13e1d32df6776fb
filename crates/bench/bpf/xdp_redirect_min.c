// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * xdp_redirect_min: the performance limit the XDP engine is compared with
 * (`nicflow bench ... --engines xdp-redirect`, issue 5). Attached natively
 * to every switch-side veth end, it redirects each frame to the port paired
 * with the one it arrived on — no parsing, no lookup, no rewrite, no
 * counters: what a switch that knew the answer in advance would cost.
 *
 *   frame on ingress ifindex I -> DEVMAP_HASH[I] = egress ifindex -> redirect
 *   (no entry: XDP_PASS, so an unpaired interface keeps working)
 *
 * Loaded by crates/bench/src/xdp_baseline.rs.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 512);
	__type(key, __u32);
	__type(value, __u32);
} peer SEC(".maps");

SEC("xdp")
int xdp_redirect_min(struct xdp_md *ctx)
{
	return bpf_redirect_map(&peer, ctx->ingress_ifindex, XDP_PASS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
