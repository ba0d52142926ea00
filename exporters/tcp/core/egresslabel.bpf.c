// SPDX-License-Identifier: GPL-2.0
/* wattbit tcp: the IPv6 flow label each outgoing TCP packet leaves with, by 5-tuple, for the
 * SciTags experiment and activity of flows marked below the socket: scitags flowd's eBPF
 * backend rewrites the label at tc egress (a clsact egress classifier), so no socket holds it
 * and the iter/tcp program (flowlabel.bpf.c) cannot see it (docs/exporters/tcp.md, "SciTags").
 *
 * Where: tp_btf/net_dev_start_xmit (xmit_one(), net/core/dev.c), the last point before the
 * driver's ndo_start_xmit. Every tc egress hook (sch_handle_egress(), tcx and clsact alike)
 * and the qdisc have run by then, so the label is what goes on the wire whatever order the
 * tc programs are in; a tcx/clsact program of our own would have to be ordered after flowd's
 * (tcx anchors, or clsact priorities that flowd's pyroute2 attach does not promise) and would
 * need CAP_NET_ADMIN and one attach per interface, hot-plugged ones included. The tracepoint
 * is one attach for every device, read-only, and needs only CAP_BPF + CAP_PERFMON (a tracing
 * program, as flowlabel.bpf.c and blockio). BTF-typed tracepoints: Linux 5.5 (commit
 * ac4414b5ca47 "bpf: Introduce BPF_TRACE_RAW_TP / tp_btf").
 *
 * Kept: an LRU hash (5-tuple -> label) bounded by max_entries (userspace sizes it,
 * tcp.packet_label_flows), so closed flows' entries leave as new ones come; userspace also
 * deletes those of sockets gone from sock_diag. Only labels the kernel did not make itself
 * are kept: the automatic label (net.ipv6.auto_flowlabels, on by default) is a hash, not a
 * marking, and is recognised from skb->hash as ip6_make_flowlabel() makes it (kernel_made()).
 */
#include "tcp_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>

#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP 6
#define FLOWLABEL_MASK 0x000FFFFF
/* the stateless flag ip6_make_flowlabel() adds under net.ipv6.flowlabel_state_ranges */
#define FLOWLABEL_NOSTATE_MASK 0x0007FFFF

struct flow_key {
	u8 addrs[32]; /* saddr, daddr as in the header */
	__be16 sport;
	__be16 dport;
	u32 pad;
};

/* the fixed IPv6 header (RFC 8200) and the TCP ports after it: read in one copy */
struct ip6_tcp {
	__be32 word; /* version, traffic class, flow label */
	__be16 payload_len;
	u8 nexthdr;
	u8 hop_limit;
	u8 addrs[32];
	__be16 sport;
	__be16 dport;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536); /* sized by userspace before load */
	__type(key, struct flow_key);
	__type(value, u32);
} egress_labels SEC(".maps");

/* the network namespace (its inode, /proc/self/ns/net) whose devices' packets are kept: the
 * tracepoint fires for every namespace, sock_diag answers for the agent's only */
const volatile u32 netns_ino = 0;

#define AF_INET6 10
#define TCP_TIME_WAIT 6
#define TCP_NEW_SYN_RECV 12

static __always_inline u32 rol32(u32 w, unsigned int s)
{
	return (w << s) | (w >> (32 - s));
}

/* Whether the packet's label (word: the header's first 32 bits as they are) is the one the
 * kernel made itself, ip6_make_flowlabel(): only when net.ipv6.auto_flowlabels is on, then
 * rol32(hash, 16) masked as a big-endian word (its low 20 bits on the wire), maybe with the
 * stateless flag, and only when the socket has no label of its own (one that equals the hash
 * by chance is the socket's). A marking that happens to equal the hash (one chance in 2^19
 * per flow) is taken for the kernel's. */
static __always_inline bool kernel_made(const struct sk_buff *skb, struct net *net, u32 word)
{
	struct sock *sk;
	struct ipv6_pinfo *np;
	unsigned char state;

	if (!net->ipv6.sysctl.auto_flowlabels)
		return false;
	if ((rol32(skb->hash, 16) ^ word) & bpf_htonl(FLOWLABEL_NOSTATE_MASK))
		return false;
	sk = skb->sk;
	if (!sk || sk->__sk_common.skc_family != AF_INET6)
		return true;
	state = sk->__sk_common.skc_state;
	/* a request or time-wait socket is no inet_sock, and has no label of its own here */
	if (state == TCP_TIME_WAIT || state == TCP_NEW_SYN_RECV)
		return true;
	np = BPF_CORE_READ((struct inet_sock *)sk, pinet6);
	return !np || !(BPF_CORE_READ(np, flow_label) & bpf_htonl(FLOWLABEL_MASK));
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(egress_label, const struct sk_buff *skb, const struct net_device *dev)
{
	struct flow_key key = {};
	struct ip6_tcp h;
	struct net *net;
	u32 label, *old;

	if (skb->protocol != bpf_htons(ETH_P_IPV6))
		return 0;
	/* BTF-typed loads (tp_btf arguments), no helper call: this runs for every packet */
	net = dev->nd_net.net;
	if (netns_ino && net->ns.inum != netns_ino)
		return 0;
	if (bpf_probe_read_kernel(&h, sizeof(h), skb->head + skb->network_header))
		return 0;
	/* a TCP segment right after the fixed header (extension headers: not followed) */
	if (h.nexthdr != IPPROTO_TCP)
		return 0;
	__builtin_memcpy(key.addrs, h.addrs, sizeof(key.addrs));
	key.sport = h.sport;
	key.dport = h.dport;
	label = bpf_ntohl(h.word) & FLOWLABEL_MASK;
	old = bpf_map_lookup_elem(&egress_labels, &key);
	if (!label || kernel_made(skb, net, h.word)) {
		if (old) /* the 5-tuple's packets no longer carry a marking: forget it */
			bpf_map_delete_elem(&egress_labels, &key);
		return 0;
	}
	if (old && *old == label)
		return 0;
	bpf_map_update_elem(&egress_labels, &key, &label, BPF_ANY);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
