// SPDX-License-Identifier: GPL-2.0
/* A test stand-in for scitags flowd's eBPF backend (scitags/backends/ebpf.py): a tc egress
 * classifier that writes one IPv6 flow label into every outgoing IPv6 TCP packet, below the
 * socket, as flowd does for the flows it is told of. MARK_LABEL (the 20-bit label) is given at
 * compile time (tests/support/v6net.py, mark_egress()): iproute2's tc loads the object, and it
 * sets no globals. With MARK_DPORT, only the packets to that TCP port (flowd marks the flows
 * it is told of, not all). Direct action, TC_ACT_OK: the packet goes on, only its label changed (no
 * checksum covers the IPv6 flow label, RFC 8200 section 8.1).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef MARK_LABEL
#error "MARK_LABEL: the 20-bit flow label to write"
#endif

SEC("tc")
int flowmark(struct __sk_buff *skb)
{
	__u32 word;
	__u8 nexthdr;
#ifdef MARK_DPORT
	__be16 dport;
#endif

	if (skb->protocol != bpf_htons(ETH_P_IPV6))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + 6, &nexthdr, 1) || nexthdr != IPPROTO_TCP)
		return TC_ACT_OK;
#ifdef MARK_DPORT
	/* the TCP header right after the fixed IPv6 header, its destination port at 2 */
	if (bpf_skb_load_bytes(skb, ETH_HLEN + 40 + 2, &dport, 2) ||
	    dport != bpf_htons(MARK_DPORT))
		return TC_ACT_OK;
#endif
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &word, 4))
		return TC_ACT_OK;
	word = (word & bpf_htonl(0xFFF00000)) | bpf_htonl(MARK_LABEL & 0xFFFFF);
	bpf_skb_store_bytes(skb, ETH_HLEN, &word, 4, 0);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
