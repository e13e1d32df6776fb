// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * tc_upcall: the TC programs of one nicflow TC port
 * (crates/nicflow/src/port/tc.rs), loaded once per port with its upcall
 * device's ifindex.
 *
 *   interface ingress: [tc_dp of the bridge's TC engine, when on] ->
 *     **tc_upcall** -> bpf_redirect to the upcall veth's near end
 *     (offloads off: the kernel segments GSO frames and finishes partial
 *     checksums there) -> far end -> the port's AF_PACKET socket.
 *   far end ingress: **tc_upcall_sink** drops every frame after the taps
 *     (the port's socket) had it, so the host stack never sees upcalls.
 *
 * tc_upcall is what makes the port a port without any engine (offload
 * none, or the engine not loaded): every frame goes to userspace, as an
 * AF_XDP port's xsk_redirect does. The engine's tc_dp runs before it and
 * only leaves it the frames it does not handle.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define TC_ACT_OK 0
#define TC_ACT_SHOT 2

/* Set by the loader (EbpfLoader::override_global). */
volatile const __u32 UPCALL_IFINDEX = 0;

SEC("classifier")
int tc_upcall(struct __sk_buff *ctx)
{
	if (!UPCALL_IFINDEX)
		return TC_ACT_OK;
	return bpf_redirect(UPCALL_IFINDEX, 0);
}

SEC("classifier")
int tc_upcall_sink(struct __sk_buff *ctx)
{
	return TC_ACT_SHOT;
}

char _license[] SEC("license") = "GPL";
