/* wattbit blockio: per-device, per-op block I/O statistics from the block-layer tracepoints.
 *
 * Loaded by exporters/blockio/bcc_backend.py with cflags:
 *   -DLAT_SLOTS, -DSIZE_SLOTS     number of histogram slots (last one is the overflow, +Inf)
 *   -DLAT_UNIT_NS, -DSIZE_UNIT    first bucket bound (1 us, 512 bytes)
 *   -DMAX_INFLIGHT                size of the LRU start map
 *   -DMAX_STATS                   size of the statistics map
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

struct start_key {
	u32 dev;
	u32 pad;
	u64 sector;
};

struct start_val {
	u64 ts;
	u32 bytes;
	u32 op;
};

struct stat_key {
	u32 dev;
	u32 op;
};

struct stat_val {
	u64 ios;		/* completions, as diskstats counts them */
	u64 bytes;		/* completed bytes, every (partial) completion, as diskstats */
	u64 errors;		/* completions with a non-zero error */
	u64 lat_sum_ns;		/* issue -> complete, for the histogram's _sum */
	u64 size_sum;		/* bytes of the paired requests, for the size histogram's _sum */
	u64 lat[LAT_SLOTS];	/* per-slot (not cumulative) counts of paired issue/complete */
	u64 size[SIZE_SLOTS];
};

/* LRU: a completion we never see (device removed, lost event) cannot grow memory. */
BPF_TABLE("lru_hash", struct start_key, struct start_val, start, MAX_INFLIGHT);
BPF_HASH(stats, struct stat_key, struct stat_val, MAX_STATS);

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

	/* If (dev, sector) is already in flight (two concurrent requests for one sector, or
	 * two flushes, which carry no sector), the key can time only the first; counts do not
	 * depend on this map (see complete), so keep the first and move on. */
	start.insert(&k, &v);
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
	struct stat_val zero = {};
	struct stat_val *s = stats.lookup_or_try_init(&sk, &zero);

	if (!s)
		return 0;
	/* I/Os, bytes and errors on every completion, whether or not we saw the issue, so they
	 * match /proc/diskstats exactly. blk_update_request() fires this once per partial
	 * completion with that part's size (bytes stay exact; a request completed in parts,
	 * which happens on error paths, counts once per part). */
	__sync_fetch_and_add(&s->ios, 1);
	__sync_fetch_and_add(&s->bytes, (u64)args->nr_sector << 9);
	if (args->error != 0)
		__sync_fetch_and_add(&s->errors, 1);

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
	unsigned int ls = wb_slot(lat, LAT_UNIT_NS, LAT_SLOTS);
	unsigned int ss = wb_slot(bytes, SIZE_UNIT, SIZE_SLOTS);

	if (ls < LAT_SLOTS)
		__sync_fetch_and_add(&s->lat[ls], 1);
	if (ss < SIZE_SLOTS)
		__sync_fetch_and_add(&s->size[ss], 1);
	__sync_fetch_and_add(&s->lat_sum_ns, lat);
	__sync_fetch_and_add(&s->size_sum, bytes);
	return 0;
}
