/* The few kernel types blockio.bpf.c reads, as CO-RE relocatable declarations.
 *
 * Only the fields used are declared; `preserve_access_index` makes clang record each access
 * as a BTF relocation, and libbpf rewrites the offsets against the running kernel's own BTF
 * (/sys/kernel/btf/vmlinux) at load. So the object compiled once at install runs on any
 * kernel with BTF whose `struct request` has these fields (all since 5.0), with no kernel
 * headers and no vmlinux.h. A generated vmlinux.h would also work but is 3-5 MB per kernel.
 * https://nakryiko.com/posts/bpf-core-reference-guide/
 */
#ifndef WATTBIT_BLOCKIO_TYPES_H
#define WATTBIT_BLOCKIO_TYPES_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef long long __s64;
typedef __u8 u8;
typedef __u32 u32;
typedef __u64 u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef __u16 __sum16;
typedef __u8 blk_status_t;
typedef _Bool bool;
#define true 1
#define false 0

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
};

enum {
	BPF_F_NO_PREALLOC = 1,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};

struct gendisk {
	int major;
	int first_minor;
	u64 diskseq;		/* since 5.15: bpf_core_field_exists() before reading it */
} __attribute__((preserve_access_index));

struct request_queue {
	struct gendisk *disk;
	int id;
} __attribute__((preserve_access_index));

/* Bit numbers of rq->rq_flags (include/linux/blk-mq.h), an enum in BTF since 6.8; relocated
 * by name, so the values here are only what clang needs to compile. */
enum rqf_flags {
	__RQF_IO_STAT = 8,
	__RQF_STATS = 11,
};

struct request {
	struct request_queue *q;
	unsigned int cmd_flags;
	unsigned int rq_flags;
	unsigned int __data_len;
	u64 start_time_ns;
	u64 io_start_time_ns;
} __attribute__((preserve_access_index));

#endif
