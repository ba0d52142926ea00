/* The few kernel types the tcp programs read (flowlabel.bpf.c: the iter/tcp walk of sockets;
 * egresslabel.bpf.c: each outgoing packet at net_dev_start_xmit), as CO-RE relocatable
 * declarations (see exporters/blockio/core/blockio_types.h for why not vmlinux.h): libbpf
 * rewrites each field's offset against the running kernel's BTF at load, and finds the sk_buff
 * fields inside their anonymous unions and struct groups (include/linux/skbuff.h,
 * struct_group(headers, ...)). One header for both: a program relocates only the fields it
 * reads, so a field only one of them reads (sock_common.skc_state) costs the other nothing.
 */
#ifndef WATTBIT_TCP_TYPES_H
#define WATTBIT_TCP_TYPES_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef long long __s64;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef __u16 __sum16;
typedef __u32 uid_t;
typedef _Bool bool;
#define true 1
#define false 0

enum bpf_map_type {
	BPF_MAP_TYPE_LRU_HASH = 9,
};

enum {
	BPF_ANY = 0,
};

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
	u64 session_id;
	u64 seq_num;
} __attribute__((preserve_access_index));

struct sock_common {
	unsigned short skc_family;
	volatile unsigned char skc_state;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

/* struct bpf_iter__tcp (net/ipv4/tcp_ipv4.c, DEFINE_BPF_ITER_FUNC(tcp, ...)): the context of
 * an iter/tcp program, one call per socket of the reader's network namespace. */
struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
	uid_t uid;
} __attribute__((preserve_access_index));

/* include/linux/ipv6.h: the label a socket sends with (IPV6_FLOWINFO_SEND and a leased label
 * at connect(), tcp_v6_connect(); used as is by ip6_make_flowlabel()), network byte order
 * (0: none of its own, the kernel's automatic one if net.ipv6.auto_flowlabels allows). */
struct ipv6_pinfo {
	__be32 flow_label;
} __attribute__((preserve_access_index));

struct inet_sock {
	struct ipv6_pinfo *pinet6;
} __attribute__((preserve_access_index));

struct tcp6_sock {
	struct ipv6_pinfo inet6;
} __attribute__((preserve_access_index));

struct tcp_sock;

/* include/linux/skbuff.h: the packet as the driver gets it. hash: the flow hash the kernel's
 * automatic flow label is made of (ip6_make_flowlabel()); for TCP the socket's sk_txhash
 * (skb_set_hash_from_sk() in __tcp_transmit_skb()). */
struct sk_buff {
	struct sock *sk;
	unsigned char *head;
	__u32 hash;
	__be16 protocol;
	__u16 network_header;
} __attribute__((preserve_access_index));

struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

/* include/net/netns/ipv6.h: net.ipv6.auto_flowlabels (0: off) */
struct netns_sysctl_ipv6 {
	u8 auto_flowlabels;
} __attribute__((preserve_access_index));

struct netns_ipv6 {
	struct netns_sysctl_ipv6 sysctl;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
	struct netns_ipv6 ipv6;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} possible_net_t;

struct net_device {
	possible_net_t nd_net;
} __attribute__((preserve_access_index));

#endif
