// SPDX-License-Identifier: GPL-2.0
/* wattbit blockio, core backend: per-device, per-op block I/O statistics from the kernel's
 * own request timestamps, in one program at block_rq_complete and no per-request map.
 *
 * Why: the bcc program (../blockio.c) times requests with an LRU map, an insert at issue and a
 * lookup + delete at completion, often on another CPU: ~760 ns per I/O. The kernel already
 * stamps every request (block/blk-mq.c):
 *   rq->start_time_ns     at allocation, when iostats are on (RQF_IO_STAT) or the request goes
 *                         through an I/O scheduler: queue + device time, what /proc/diskstats
 *                         and iostat's await measure;
 *   rq->io_start_time_ns  in blk_mq_start_request(), right after the block_rq_issue
 *                         tracepoint, when the queue keeps statistics (QUEUE_FLAG_STATS: wbt,
 *                         blk-iolatency, hybrid polling): device time, what the bcc program
 *                         measures. Both are 0 when not taken (blk_mq_rq_ctx_init()).
 * Prior art: bcc's tools/biolatpcts.py reads the same fields from a raw tracepoint.
 *
 * Per request, the device time is used where the request carries it, else the queue + device
 * time; the two clocks count into separate histograms and userspace exports one clock per
 * device (core/backend.py), so dashboards never mix them. Where neither stamp exists (iostats
 * off and no statistics on the queue), userspace attaches `issue` below, which times those
 * requests only, with a map keyed by the request's address (unique while in flight).
 *
 * Counts, bytes and errors are taken on every completion, as /proc/diskstats counts them; the
 * latency only on the last part of a request (nr_bytes covers what is left of it).
 */
#include "blockio_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "wattbit_buckets.h"

#define OP_READ 0
#define OP_WRITE 1
#define OP_FLUSH 2
#define OP_DISCARD 3
#define NOPS 4

/* Latency bounds: up to LAT_MAX_BOUNDS, set by userspace before load (.rodata: the verifier
 * sees them as constants, and drops the size histogram's code when it is off). Unused
 * entries are ~0, so the binary search needs no length. The one variable in .rodata, so
 * backend.py finds it at offset 0 without parsing BTF (it checks the section's size). */
#define LAT_MAX_BOUNDS 32
#define LAT_SLOTS (LAT_MAX_BOUNDS + 1)
#define SIZE_SLOTS 17		/* 512 B * 2^k, k = 0..15, then +Inf: ../wattbit_buckets.h */
#define SIZE_UNIT 512
#define CLOCK_DEVICE 0
#define CLOCK_QUEUE 1

const volatile struct {
	u64 lat_bounds_ns[LAT_MAX_BOUNDS];
	u64 size_histogram;
	u64 max_queues;		/* request queue ids below this have a slot in `slots` */
	/* Which kernel timestamps to read: STAMP_DEVICE | STAMP_QUEUE in production. Tests clear
	 * bits to drive the queue-clock and issue-side paths on devices that carry both stamps
	 * (the verifier drops the code of a cleared bit). */
	u64 stamps;
	u64 ncpus;		/* possible CPUs: the copies `sum` adds up */
} cfg = {};

#define STAMP_DEVICE 1
#define STAMP_QUEUE 2

/* A disk's identity is (dev, diskseq): the kernel gives every disk a new sequence number
 * when it is created and when its medium changes (a loop device's attach and detach), and
 * never reuses one (include/linux/blkdev.h; "block: add disk sequence number", Linux 5.15,
 * https://lore.kernel.org/all/20210623105858.6978-1-mcroce@linux.microsoft.com/), where the
 * dev_t is reused at once by the next disk of the driver (a re-created loop7, an NVMe-oF
 * namespace after a reconnect). Keyed by it, a new disk starts from zero, exactly from its
 * first request, however soon after its predecessor it came and whenever userspace looks.
 * 0 on kernels before 5.15 (no diskseq: there the dev_t alone names the disk). */
struct stat_key {
	u32 dev;
	u32 op;
	u64 seq;
};

/* struct stat_val: the counters, described once in ../layout.py (generated ../stat_val.h,
 * shared with the bcc program; backend.py reads them at the offsets layout.py computes). */
#define CLOCKS 2
#include "stat_val.h"

/* A first entry's zeros (.bss: a stat_val is too big for the 512-byte stack). */
struct stat_val zero_val = {};

/* Per-CPU, updated with plain adds: tracing programs do not nest on a CPU and run with
 * preemption off. BPF_F_NO_PREALLOC: memory only for the (dev, op) pairs that do I/O, not
 * max_entries x CPUs up front; tracing programs may use such maps since 6.1 (bpf_mem_alloc),
 * so backend.py preallocates a smaller map on older kernels. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096);
	__type(key, struct stat_key);
	__type(value, struct stat_val);
} stats SEC(".maps");

/* The fast path: one entry per (request queue, op), indexed by the queue's id, a small dense
 * number the block layer allocates per queue (blk_queue_ida) and reuses after a queue is
 * freed. An array lookup is inlined by the verifier: measured 139 against 181 ns per
 * completion with the hash below (empty program: 62), 4k randread QD32 on a loop device.
 * Preallocated for every possible CPU: 4 x max_queues x 736 B each, sized by backend.py to
 * the host's block devices. A slot belongs to the (dev, op) that claimed it first on that
 * CPU; a queue id reused by another disk, or one beyond max_queues, goes to `stats`. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 256);
	__type(key, u32);
	__type(value, struct stat_val);
} slots SEC(".maps");

/* Which slots were ever claimed (their key), so userspace reads only those; a section of its
 * own, so it is the whole of one map for userspace (libbpf maps each .data.* section). */
#define MAX_SLOTS 4096
u64 used[MAX_SLOTS] SEC(".data.used") = {};

/* Updates that failed because the map was full, by map (FULL_STATS: a completion not
 * counted at all; FULL_START: a request not timed): never silent, exported as
 * wattbit_blockio_bpf_map_full_total. Atomic adds: only on that rare path. */
#define FULL_STATS 0
#define FULL_START 1
u64 map_full[2] SEC(".data.full") = {};

/* Issue times of requests without a kernel timestamp; only filled while `issue` is attached. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u64);
	__type(value, u64);
} start SEC(".maps");

/* The op the way blk_fill_rwbs() (../blockio.c's rwbs_op) names it, so both backends count
 * the same: secure erase is a discard ('D'); write-zeroes, zone management and passthrough
 * ('N') are not counted. */
static __always_inline u32 req_op(u32 cmd_flags)
{
	u32 op = cmd_flags & 0xff;	/* REQ_OP_MASK: REQ_OP_BITS is 8 */

	if (op <= 3)
		return op;		/* REQ_OP_READ, WRITE, FLUSH, DISCARD are 0..3 */
	if (op == 5)
		return OP_DISCARD;	/* REQ_OP_SECURE_ERASE */
	return NOPS;
}

/* Which stamps this request really carries. The fields are not reset for requests that do
 * not need them: measured here with iostats off, start_time_ns held values 0.1-25 s old (a
 * recycled request's). So each is trusted only with the flag that says it was taken:
 * RQF_STATS (set with io_start_time_ns in blk_mq_start_request) and RQF_IO_STAT (iostats on:
 * start_time_ns taken at allocation). Kernels before 6.8 have no rqf_flags enum in BTF; there
 * a non-zero stamp is trusted, as blk_mq_rq_ctx_init() zeroed both on those kernels. */
static __always_inline u32 rqf(u32 bit_6_8)
{
	return 1u << bit_6_8;
}

static __always_inline u64 device_stamp(struct request *rq)
{
	if (!(cfg.stamps & STAMP_DEVICE))
		return 0;
	if (bpf_core_enum_value_exists(enum rqf_flags, __RQF_STATS) &&
	    !(rq->rq_flags & rqf(bpf_core_enum_value(enum rqf_flags, __RQF_STATS))))
		return 0;
	return rq->io_start_time_ns;
}

static __always_inline u64 queue_stamp(struct request *rq)
{
	if (!(cfg.stamps & STAMP_QUEUE))
		return 0;
	if (bpf_core_enum_value_exists(enum rqf_flags, __RQF_IO_STAT) &&
	    !(rq->rq_flags & rqf(bpf_core_enum_value(enum rqf_flags, __RQF_IO_STAT))))
		return 0;
	return rq->start_time_ns;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(issue, struct request *rq)
{
	/* Only requests without a queue stamp. io_start_time_ns is taken after this tracepoint
	 * where the queue keeps statistics; completion then uses it and leaves this entry to
	 * be overwritten at the address's next issue or to age out of the LRU. */
	if (queue_stamp(rq))
		return 0;
	u64 key = (u64)rq;
	u64 now = bpf_ktime_get_ns();

	if (bpf_map_update_elem(&start, &key, &now, BPF_ANY))
		__sync_fetch_and_add(&map_full[FULL_START], 1);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	u32 op = req_op(rq->cmd_flags);

	if (op >= NOPS)
		return 0;
	struct gendisk *disk = rq->q->disk;

	if (!disk)
		return 0;
	/* The kernel's internal MKDEV (major << 20 | minor), as the block tracepoints report it. */
	struct stat_key sk = { .dev = ((u32)disk->major << 20) | (u32)disk->first_minor, .op = op };
	u64 key = ((u64)sk.dev << 8) | (op + 1);
	u32 qid = rq->q->id;
	struct stat_val *s = 0;

	if (bpf_core_field_exists(disk->diskseq))
		sk.seq = disk->diskseq;
	if (qid < cfg.max_queues) {
		u32 idx = qid * NOPS + op;

		s = bpf_map_lookup_elem(&slots, &idx);
		if (s && (s->key != key || s->seq != sk.seq)) {
			/* Another disk's counts: the id was freed with that disk's queue (ids are
			 * unique among live queues, blk_queue_ida), so that disk is gone and its
			 * slot is this one's. Reset on this CPU only: no other CPU writes this copy
			 * (tracing programs do not nest, and a copy is per CPU), so unlike a reset
			 * from userspace this can lose nothing of the new disk's. */
			if (s->key)
				*s = zero_val;
			s->key = key;
			s->seq = sk.seq;
			used[idx & (MAX_SLOTS - 1)] = key;
		}
	}
	if (!s)
		s = bpf_map_lookup_elem(&stats, &sk);
	if (!s) {
		/* Only a (dev, op)'s first completion gets here. Userspace deletes the entries of
		 * disks that are gone, so the map holds the disks present, not all that ever were. */
		bpf_map_update_elem(&stats, &sk, &zero_val, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&stats, &sk);
		if (!s) {
			__sync_fetch_and_add(&map_full[FULL_STATS], 1);
			return 0;
		}
	}
	s->ios += 1;
	s->bytes += nr_bytes;
	if (error)
		s->errors += 1;
	if (nr_bytes < rq->__data_len)
		return 0;		/* a partial completion: the request goes on */

	u64 ts = device_stamp(rq);
	u32 clock = CLOCK_DEVICE;

	if (!ts) {
		ts = queue_stamp(rq);
		clock = CLOCK_QUEUE;
		if (!ts) {
			u64 key = (u64)rq;
			u64 *t = bpf_map_lookup_elem(&start, &key);

			if (t) {
				ts = *t;
				clock = CLOCK_DEVICE;
				bpf_map_delete_elem(&start, &key);
			}
		}
	}
	u64 now = bpf_ktime_get_ns();

	if (!ts || ts > now) {
		s->untimed += 1;
		return 0;
	}
	u64 lat = now - ts;

	u32 slot = wb_bound_slot(cfg.lat_bounds_ns, lat);

	/* Always true; says so to the verifier, which loses the bound through the search. */
	if (slot >= LAT_SLOTS)
		slot = LAT_SLOTS - 1;
	s->lat[clock * LAT_SLOTS + slot] += 1;
	s->lat_sum_ns[clock] += lat;
	if (cfg.size_histogram) {
		u32 ss = wb_slot(nr_bytes, SIZE_UNIT, SIZE_SLOTS);

		if (ss >= SIZE_SLOTS)
			ss = SIZE_SLOTS - 1;
		s->size[ss] += 1;
		s->size_sum += nr_bytes;
	}
	return 0;
}

/* The per-CPU copies of the claimed slots summed in the kernel, for userspace to read in one
 * batch (issue 35).
 *
 * Why: summed in Python (a strided sum per word), a 48-disk host's 96 values cost 0.5 ms of
 * each read at 2 CPUs and an estimated 2.9 ms at 128 (bench/blockio_read.py), after the
 * kernel had copied every CPU's copy out (96 x 128 x 736 B: 9 MB). Here ~100 ns per copy, in
 * place: `sum` (a syscall program: userspace runs it with BPF_PROG_TEST_RUN, Linux 5.14)
 * reads each CPU's copy (bpf_map_lookup_percpu_elem, 5.19) and writes one struct stat_val
 * per claimed slot into `sums`; its key and seq words say whose. It returns how many it
 * wrote. bpf_loop (5.17) runs the loops, so the verifier checks each body once, however many
 * CPUs and slots. Userspace holds a lock around a run and its read: `sums` is one buffer.
 * The hash map (queue ids beyond the slots: rare) is still summed by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);	/* set by backend.py: one per slot */
	__type(key, u32);
	__type(value, struct stat_val);
} sums SEC(".maps");

#define STAT_WORDS (sizeof(struct stat_val) / 8)
#define KEY_WORD (__builtin_offsetof(struct stat_val, key) / 8)
#define SEQ_WORD (__builtin_offsetof(struct stat_val, seq) / 8)

struct slot_sum {
	u32 idx;		/* the slot */
	u32 n;			/* its record in `sums` */
	u64 key;		/* the first claim seen (0: none yet) */
	u64 seq;
	u64 mixed;		/* copies claim different disks */
};

static long add_copy(u64 cpu, void *c)
{
	struct slot_sum *ss = c;
	u64 *w = bpf_map_lookup_percpu_elem(&slots, &ss->idx, cpu);
	u64 *out = bpf_map_lookup_elem(&sums, &ss->n);

	if (!w || !out)
		return 1;
	if (w[KEY_WORD]) {
		if (!ss->key) {
			ss->key = w[KEY_WORD];
			ss->seq = w[SEQ_WORD];
		} else if (w[KEY_WORD] != ss->key || w[SEQ_WORD] != ss->seq) {
			ss->mixed = 1;
		}
	}
#pragma unroll
	for (u32 i = 0; i < STAT_WORDS; i++)
		out[i] += w[i];
	return 0;
}

/* One slot: its copies summed into the next record, which says whose they are. Where the
 * copies claim different disks (a queue id that went to another disk, with CPUs that have
 * not completed its I/O since), the record has key 0 and the slot's index in seq: userspace
 * reads that slot's copies itself. */
static long sum_slot(u64 i, void *c)
{
	u32 *n = c;
	struct slot_sum ss = { .idx = i, .n = *n };
	struct stat_val *out;

	if (!used[i & (MAX_SLOTS - 1)])
		return 0;
	out = bpf_map_lookup_elem(&sums, &ss.n);
	if (!out)
		return 1;		/* `sums` is full: cannot be, one record per slot */
	*out = zero_val;
	bpf_loop(cfg.ncpus, add_copy, &ss, 0);
	if (!ss.key)
		return 0;
	out->key = ss.mixed ? 0 : ss.key;
	out->seq = ss.mixed ? i : ss.seq;
	*n += 1;
	return 0;
}

SEC("syscall")
int sum(void *ctx)
{
	u32 n = 0;
	u32 nslots = cfg.max_queues * NOPS;

	bpf_loop(nslots < MAX_SLOTS ? nslots : MAX_SLOTS, sum_slot, &n, 0);
	return n;
}

/* The floor of tracing at all: bench/blockio_overhead.py attaches this alone to measure what
 * an empty program on the same attach point costs. */
SEC("tp_btf/block_rq_complete")
int BPF_PROG(empty, struct request *rq)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
