/* The few kernel types flowlabel.bpf.c reads, as CO-RE relocatable declarations (see
 * exporters/blockio/core/blockio_types.h for why not vmlinux.h): libbpf rewrites each field's
 * offset against the running kernel's BTF at load.
 */
#ifndef WATTBIT_FLOWLABEL_TYPES_H
#define WATTBIT_FLOWLABEL_TYPES_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef long long __s64;
typedef __u32 u32;
typedef __u64 u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef __u16 __sum16;
typedef __u32 uid_t;
typedef _Bool bool;

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
	u64 session_id;
	u64 seq_num;
} __attribute__((preserve_access_index));

struct sock_common {
	unsigned short skc_family;
} __attribute__((preserve_access_index));

/* struct bpf_iter__tcp (net/ipv4/tcp_ipv4.c, DEFINE_BPF_ITER_FUNC(tcp, ...)): the context of
 * an iter/tcp program, one call per socket of the reader's network namespace. */
struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
	uid_t uid;
} __attribute__((preserve_access_index));

/* include/linux/ipv6.h: the label a socket sends with (IPV6_FLOWINFO_SEND and a leased label
 * at connect(), tcp_v6_connect(); used as is by ip6_make_flowlabel()), network byte order. */
struct ipv6_pinfo {
	__be32 flow_label;
} __attribute__((preserve_access_index));

struct tcp6_sock {
	struct ipv6_pinfo inet6;
} __attribute__((preserve_access_index));

struct tcp_sock;

#endif
