/* The log2 bucket convention shared by the BPF program and its boundary tests.
 *
 * Slot k (0 <= k < nslots-1) holds values v with  2^(k-1)*unit < v <= 2^k*unit,
 * slot 0 holds v <= unit (zero included), and the last slot holds everything larger.
 * This is exactly Prometheus' cumulative "le" semantics with upper bounds unit*2^k,
 * so userspace only has to accumulate the slots: no re-bucketing, no off-by-one.
 *
 * Plain C with no kernel headers, so tests/unit/test_buckets.py compiles it with gcc
 * and checks the boundaries (0, 1, 2, 3, 2^k-1, 2^k, 2^k+1 units) against Python.
 */
#ifndef WATTBIT_BUCKETS_H
#define WATTBIT_BUCKETS_H

/* floor(log2(v)) for v > 0, branch-free so the verifier sees no loop. */
static __always_inline unsigned int wb_log2_floor(unsigned long long v)
{
	unsigned int r, shift;

	r = (v > 0xFFFFFFFFULL) << 5; v >>= r;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (unsigned int)(v >> 1);
	return r;
}

/* The slot of value (in base units, e.g. ns) for buckets whose first bound is `unit`. */
static __always_inline unsigned int wb_slot(unsigned long long value, unsigned long long unit,
					    unsigned int nslots)
{
	/* v <= 2^k*unit  <=>  ceil(v/unit) <= 2^k  because 2^k*unit is a multiple of unit */
	unsigned long long units = (value + unit - 1) / unit;
	unsigned int k = units <= 1 ? 0 : wb_log2_floor(units - 1) + 1;

	return k < nslots - 1 ? k : nslots - 1;
}

/* The slot of value among up to 32 sorted upper bounds (unused ones ~0): how many bounds lie
 * below value, i.e. the slot whose le is the first bound >= value; 32 means +Inf. A fixed
 * five-step binary search (the verifier sees no loop once unrolled); the core program's
 * configurable latency buckets. */
static __always_inline unsigned int wb_bound_slot(const volatile unsigned long long *bounds,
						  unsigned long long value)
{
	unsigned int lo = 0;

#pragma unroll
	for (unsigned int step = 16; step > 0; step >>= 1)
		if (bounds[(lo + step - 1) & 31] < value)
			lo += step;
	if (bounds[lo & 31] < value)
		lo++;
	return lo;
}

#endif
