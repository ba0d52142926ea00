/* wattbit blockio: per-device, per-op block I/O statistics from the block-layer tracepoints.
 *
 * Loaded by exporters/blockio/bcc_backend.py with cflags:
 *   -DLAT_SLOTS, -DSIZE_SLOTS     number of histogram slots (last one is the overflow, +Inf)
 *   -DLAT_SLOT(v)                 the latency slot of v ns: the configured bounds below v,
 *                                 a sum of comparisons (branch-free, no table in memory)
 *   -DSIZE_UNIT                   first size bucket bound (512 bytes)
 *   -DMAX_INFLIGHT                size of the LRU start map
 *   -DMAX_STATS                   size of the statistics map
 *   -DPERCPU_STATS                per-CPU statistics (kernel >= 6.1, see the map below)
 *
 * Everything is cumulative since load and userspace never clears a map: Prometheus computes
 * rates, and clearing on read would lose the increments between read and clear.
 *
 * Busy time and in-flight requests are deliberately not derived here: the kernel skips a
 * tracepoint program that fires while another BPF program runs on the same CPU
 * (bpf_prog_active, counted as recursion_misses), and one skipped completion would leave a
 * paired in-flight count stuck above zero for ever. The kernel's own blk-mq accounting
 * (/proc/diskstats io_ticks and in-flight) never misses, so userspace reads those.
 *
 * Cost per I/O (bench/blockio_overhead.py, 4k randread QD32 on a loop device over tmpfs,
 * 2 vCPUs, kernel 6.18, kernel.bpf_stats_enabled=1), before and after the changes marked
 * "Measured" below, run back to back: 820 -> 719 ns (issue 351 -> 342, complete 468 -> 381;
 * bpftrace 942 and 936 in the same runs). Kernels before 6.1 keep the shared statistics map
 * and get about -38 ns. Almost all of what is left is the kernel's, not this code's (timed
 * with per-operation ktime probes): an empty program costs ~43 ns under bpf_stats,
 * bpf_ktime_get_ns ~35 ns (bpf_ktime_get_boot_ns the same), the LRU insert ~200-250 ns (a
 * random bucket in the 65536-bucket array is a cache miss; ~160 ns with MAX_INFLIGHT=4096),
 * the LRU lookup + delete ~80 ns when the completion runs on the issuing CPU and ~350 ns when
 * it runs on another (its cache lines move; 30-70% of completions here, as the scheduler
 * places the loop worker). Those fixed parts alone exceed 300 ns per I/O.
 *
 * Tracepoints are the stable interface (their format is read from tracefs at load time), so
 * this compiles against the nearest kernel headers even on a kernel without its own.
 * block_rq_issue/_complete report the whole disk's dev_t (rq->q->disk), encoded as the kernel's
 * internal MKDEV: major << 20 | minor (include/linux/kdev_t.h).
 */
#include <uapi/linux/ptrace.h>
#include "wattbit_buckets.h"

#define OP_READ 0
#define OP_WRITE 1
#define OP_FLUSH 2
#define OP_DISCARD 3
#define OP_SKIP 255

/* Still (dev, sector), without the 4 padding bytes. Measured: -13 to -18 ns per completion and
 * -2 to -4 per issue (paired runs, every completion faster): the kernel hashes a key with
 * jhash2() over its 32-bit words, and 3 words take only the final mix where 4 take a full
 * round more, on each of the three map operations per I/O. clang still stores sector and dev
 * as one u64 and one u32 into the (8-aligned) stack slot. */
struct start_key {
	u64 sector;
	u32 dev;
} __attribute__((packed));

struct start_val {
	u64 ts;
	u32 bytes;
	u32 op;
};

struct stat_key {
	u32 dev;
	u32 op;
};

/* struct stat_val: the counters, described once in layout.py (generated stat_val.h, shared
 * with the core program; bcc_backend.py reads them at the offsets layout.py computes). One
 * clock: issue -> complete, paired here, is the device clock. key, seq and untimed stay 0. */
#define CLOCKS 1
#define CLOCK_DEVICE 0
#include "stat_val.h"

/* LRU: a completion we never see (device removed, lost event) cannot grow memory.
 * Measured: BPF_F_NO_COMMON_LRU (per-CPU LRU lists) costs +79 ns per I/O (issue +42, complete
 * +33, paired runs): every pop rotates the CPU's list, and a completion on another CPU still
 * takes the issuing CPU's list lock to free the node. It also splits MAX_INFLIGHT into
 * MAX_INFLIGHT / nr_cpus per CPU. So the common LRU stays. */
BPF_TABLE("lru_hash", struct start_key, struct start_val, start, MAX_INFLIGHT);

#ifdef PERCPU_STATS
/* Per-CPU statistics, updated with plain adds. Measured: -46 ns per completion against one
 * shared entry updated with seven __sync_fetch_and_add (lock-prefixed adds on three cache lines
 * that move between the CPUs completing I/O for the device; on a big host every CPU completes
 * NVMe I/O, so the shared entry was a host-wide hot spot). Plain adds are safe: tracing
 * programs do not nest on a CPU (bpf_prog_active) and run with preemption disabled.
 * Userspace sums the copies modulo 2^64, as the atomics wrapped (bcc_backend.py: 0.1-0.2 ms
 * per entry at 128 CPUs).
 * BPF_F_NO_PREALLOC: per-CPU memory (336 bytes x CPUs with the default buckets) only for the (dev, op) pairs that did
 * I/O, not MAX_STATS x CPUs up front (400 MB at 128 CPUs). Tracing programs may use run-time
 * allocated maps safely only since 6.1 (bpf_mem_alloc); 5.6-6.0 load them with a WARN_ONCE
 * (a panic under panic_on_warn) and PREEMPT_RT refuses them, so bcc_backend.py sets
 * PERCPU_STATS on 6.1 and later only. */
BPF_F_TABLE("percpu_hash", struct stat_key, struct stat_val, stats, MAX_STATS, BPF_F_NO_PREALLOC);
#define STAT_ADD(field, n) ((field) += (n))
#else
/* Before 6.1: one preallocated entry per (dev, op) shared by every CPU, atomic adds. */
BPF_HASH(stats, struct stat_key, struct stat_val, MAX_STATS);
#define STAT_ADD(field, n) __sync_fetch_and_add(&(field), (n))
#endif

BPF_ARRAY(zeroes, struct stat_val, 1);

/* Completions not counted because `stats` was full: never silent (bcc_backend.py exports it
 * as wattbit_blockio_bpf_map_full_total{map="stats"}); userspace deletes the entries of
 * disks that are gone, so it fills only with more (device, op) pairs present at once than
 * MAX_STATS. */
BPF_ARRAY(map_full, u64, 1);

/* rwbs is filled by blk_fill_rwbs() (block/blktrace.c): an optional leading 'F' for
 * REQ_PREFLUSH, then the op letter (W, D, R, F for REQ_OP_FLUSH, N for everything else).
 * 'N' (write-zeroes, zone management, driver passthrough) is not counted: /proc/diskstats
 * does not count passthrough either, and it has no place among read/write/flush/discard. */
static __always_inline u32 rwbs_op(const char *rwbs)
{
	char c = rwbs[0];

	if (c == 'F') {
		char n = rwbs[1];

		if (n == 'W')
			return OP_WRITE;
		if (n == 'R')
			return OP_READ;
		if (n == 'D')
			return OP_DISCARD;
		if (n == 'N')
			return OP_SKIP;
		return OP_FLUSH;
	}
	if (c == 'R')
		return OP_READ;
	if (c == 'W')
		return OP_WRITE;
	if (c == 'D')
		return OP_DISCARD;
	return OP_SKIP;
}

TRACEPOINT_PROBE(block, block_rq_issue)
{
	u32 op = rwbs_op(args->rwbs);

	if (op == OP_SKIP)
		return 0;

	u64 now = bpf_ktime_get_ns();
	struct start_key k = { .dev = args->dev, .sector = args->sector };
	struct start_val v = { .ts = now, .bytes = args->bytes, .op = op };

	/* Overwrite: an entry already there is either a request still in flight for the same
	 * sector (two concurrent ones, or two flushes, which carry no sector; the key can time
	 * only one, and the earlier one is then timed from the later issue: shorter, never
	 * longer) or one whose completion the program was not run for (docs/exporters/
	 * blockio.md, "Completions the program is not run for"). Kept, such a stale entry would
	 * time the next request for that sector from an issue long gone: a latency beyond any
	 * the device took (a test run beside others' BPF loads: 0.375 s summed against fio's
	 * 0.307 s over the same 1,009 writes). Counts do not depend on this map (complete). */
	start.update(&k, &v);
	return 0;
}

/* A requeued request leaves the device and will be issued again: forget this issue so the
 * re-issue times the device afresh. */
TRACEPOINT_PROBE(block, block_rq_requeue)
{
	struct start_key k = { .dev = args->dev, .sector = args->sector };

	start.delete(&k);
	return 0;
}

TRACEPOINT_PROBE(block, block_rq_complete)
{
	u32 op = rwbs_op(args->rwbs);

	if (op == OP_SKIP)
		return 0;

	u64 now = bpf_ktime_get_ns();
	struct stat_key sk = { .dev = args->dev, .op = op };
	struct stat_val *s = stats.lookup(&sk);

	if (!s) {
		/* Only the first completion of a (dev, op) gets here. The zeros come from a
		 * one-entry array, not the stack: with many latency bounds LAT_SLOT's comparisons
		 * spill registers, and a 336-byte stat_val on the stack then passes the 512-byte
		 * limit. (Measured before: -17 ns per completion against lookup_or_try_init(),
		 * which writes its zero argument to the stack on every call, hit or miss.) Another
		 * CPU may insert first: insert() then fails and the lookup finds its entry. */
		u32 z = 0;
		struct stat_val *zero = zeroes.lookup(&z);

		if (!zero)
			return 0;
		stats.insert(&sk, zero);
		s = stats.lookup(&sk);
		if (!s) {
			u64 *full = map_full.lookup(&z);

			if (full)
				__sync_fetch_and_add(full, 1);
			return 0;
		}
	}
	/* I/Os, bytes and errors on every completion, whether or not we saw the issue, so they
	 * match /proc/diskstats exactly. blk_update_request() fires this once per partial
	 * completion with that part's size (bytes stay exact; a request completed in parts,
	 * which happens on error paths, counts once per part). */
	STAT_ADD(s->ios, 1);
	STAT_ADD(s->bytes, (u64)args->nr_sector << 9);
	if (args->error != 0)
		STAT_ADD(s->errors, 1);

	struct start_key k = { .dev = args->dev, .sector = args->sector };
	struct start_val *v = start.lookup(&k);

	if (!v)
		return 0;	/* issued before we loaded, a sector collision, or a later part */
	u64 ts = v->ts;
	u32 bytes = v->bytes;

	/* Only the CPU whose delete succeeds times the request. */
	if (start.delete(&k) != 0)
		return 0;

	u64 lat = now - ts;
	/* The configured bounds (blockio.latency_buckets) as compiled into LAT_SLOT by
	 * bcc_backend.lat_slot_macro(); tests/unit/test_buckets.py pins it against the core
	 * program's binary search and Prometheus' le. */
	unsigned int ls = LAT_SLOT(lat);
	unsigned int ss = wb_slot(bytes, SIZE_UNIT, SIZE_SLOTS);

	if (ls < LAT_SLOTS)
		STAT_ADD(s->lat[CLOCK_DEVICE * LAT_SLOTS + ls], 1);
	if (ss < SIZE_SLOTS)
		STAT_ADD(s->size[ss], 1);
	STAT_ADD(s->lat_sum_ns[CLOCK_DEVICE], lat);
	STAT_ADD(s->size_sum, bytes);
	return 0;
}
