// SPDX-License-Identifier: GPL-2.0
/* wattbit tcp: the IPv6 flow label each TCP socket sends with, for the SciTags experiment and
 * activity of its flow (exporters/tcp/scitags.py). sock_diag has no flow-label attribute (up
 * to Linux 6.18), so an iter/tcp program (Linux 5.9, commit 52d87d5f6418 "net: bpf: implement
 * bpf iterator for tcp") walks the reader's network namespace's TCP sockets and writes one
 * record per IPv6 socket with a label: its cookie (the idiag_cookie sock_diag gives, both
 * sock_gen_cookie()) and the label. Nothing is attached to any path packets take: the walk
 * runs when userspace reads the iterator, once per sample.
 */
#include "tcp_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#define AF_INET6 10
#define FLOWLABEL_MASK 0x000FFFFF /* of the host-order flowinfo word */

struct record {
	u64 cookie;
	u32 flow_label; /* host byte order, 20 bits */
	u32 pad;
};

SEC("iter/tcp")
int flow_labels(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp6_sock *tp6;
	struct record rec = {};
	__be32 label;

	if (!skc || BPF_CORE_READ(skc, skc_family) != AF_INET6)
		return 0;
	/* NULL for a request or time-wait socket, which send no data */
	tp6 = bpf_skc_to_tcp6_sock(skc);
	if (!tp6)
		return 0;
	label = BPF_CORE_READ(tp6, inet6.flow_label);
	rec.flow_label = bpf_ntohl(label) & FLOWLABEL_MASK;
	if (!rec.flow_label)
		return 0;
	rec.cookie = bpf_get_socket_cookie(tp6);
	bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
