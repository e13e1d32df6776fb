// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * xsk_redirect: the XDP program of nicflow's AF_XDP port
 * (crates/nicflow/src/port/afxdp.rs), attached to the interface the port
 * opens.
 *
 * Where it sits in a frame's path:
 *
 *   wire / veth peer -> driver (native XDP) or netif_receive_skb (generic
 *   XDP) -> **this program** -> XSKMAP -> the AF_XDP socket bound to the
 *   frame's rx queue -> its rx ring in the UMEM -> AfXdpPort::recv_batch ->
 *   nicflow's userspace datapath.
 *
 * Today it does one thing: every frame goes to the AF_XDP socket registered
 * for the queue it arrived on (key = rx_queue_index). A queue without a
 * socket in the map gets XDP_PASS (the lower bits of bpf_redirect_map's
 * flags are the action used when the lookup fails), so the interface keeps
 * working for the host stack while the port is being set up or if it only
 * serves some queues.
 *
 * It is loaded as "xdp.frags" (BPF_F_XDP_HAS_FRAGS): frames larger than one
 * buffer (GSO super-frames reaching generic XDP, jumbo frames) are redirected
 * as multi-buffer frames, which the socket receives as several descriptors
 * when it is bound with XDP_USE_SG, instead of being dropped by the kernel.
 * On veth in native mode it also keeps the peer's maximum MTU large.
 *
 * The XDP fast path lives next to it: with `offload = "xdp"` (the default)
 * the bridge swaps this program's link for xdp_dp.c, which looks the frame's
 * flow up in BPF maps first and ends with the same redirect to the AF_XDP
 * socket on a miss (crates/nicflow/src/offload/, docs/offload.md). This
 * program remains what a port runs with offload off or before the bridge's
 * engine takes over.
 *
 * Build: crates/nicflow/build.rs runs
 *   clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -c
 * and the object is embedded in the nicflow binary (include_bytes!).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Queue id -> AF_XDP socket. Userspace (AfXdpPort::open) stores its
 * socket at the key of the queue it bound to. 64 covers any veth and most
 * NICs; the port only binds queue 0 today. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

SEC("xdp.frags")
int xsk_redirect(struct xdp_md *ctx)
{
	/* Future fast-path engine: flow lookup and in-kernel actions go here,
	 * before the redirect (see the comment at the top of this file). */
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

/* The file is Apache-2.0 OR GPL-2.0-only; declaring the GPL option to the
 * kernel keeps GPL-only helpers available to the future engine. */
char _license[] SEC("license") = "GPL";
