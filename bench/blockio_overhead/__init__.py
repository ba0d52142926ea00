"""Cost of wattbit's blockio tracers: IOPS kept, kernel time per I/O, agent start, latency.

One run, three parts (--parts), all on a loop device over tmpfs (the fastest block device at
hand, so a per-I/O cost shows up as much as it can), under /tmp/wattbit-bench.lock:

iops      fio 4k random reads at QD32 in alternating pairs: each pair is one fio run without
          any tracer and one with the tracer attached, the order swapped from pair to pair and
          the tracers rotated, so drift does not bias one side. Tracers (--tracers):

            core      the real agent (python -m collector.cli agent), blockio backend core: the
                      CO-RE program at tp_btf/block_rq_complete; scraped once a second during
                      the run as Prometheus would
            bcc       the real agent, blockio backend bcc (the backend core replaces), scraped
                      the same way
            empty     blockio.bpf.o's `empty` program alone at tp_btf/block_rq_complete, held by
                      a small subprocess (this script with --hold-empty): the floor of tracing
                      at all on the core's attach point
            bpftrace  blockio_overhead.bt (in this package), the bcc program's work as a
                      bpftrace script
            ebpf_exporter  only when asked for, with --ebpf-exporter PATH (its binary; the
                      source tree beside it) and --libbpf-include: its biolatency example,
                      built by bench/harness.py as its examples/Makefile does (issue 35)

          IOPS ratio = IOPS with / without, per pair, with kernel.bpf_stats_enabled=0. The
          core's against the empty program's: the median over pair rounds of (core ratio -
          empty ratio) in percentage points; both pairs of a round run within minutes of each
          other. Kernel time per I/O comes from a separate cost run per tracer session
          (--cost-runtime seconds, bpf_stats on: its accounting, ~40 ns per program run here,
          would slow only the traced side): the run_time_ns deltas of the tracer's programs
          attached to block_rq_* tracepoints (found with bpftool perf/link show and the
          tracer's own fds), divided by fio's I/Os. For the agents, the completions they
          counted on the loop device against fio's I/Os show missed events.

start     the agent started --starts times per backend (core and bcc alternately, after one
          uncounted start of each), with the default agent configuration apart from
          blockio.backend (nic and smart on, as deployed): seconds from spawn to the first
          /metrics answer holding wattbit_blockio_backend_info for that backend, and VmRSS
          (/proc/PID/status) after --settle seconds more of one scrape a second.

latency   the same fio job (4k random reads, QD1, libaio, direct, --lat-io-size bytes,
          lat_percentiles=1) run alternately under a core and a bcc agent (2 s after it is
          ready, so its start-up work is done), both with 31 fine latency bounds (1, 1.25,
          1.6, 2, 2.5, 3.2, 4, 5, 6.4, 8 x 10^k us, k = 0..2, and 1 ms): the median of the
          histogram's deltas over the run (interpolated as Prometheus' histogram_quantile
          does) and the mean (_sum/_count), against fio's clat and total-latency (slat +
          clat) medians of the same run. core/bcc: the median over pairs of the ratio of the
          two histogram medians, and of the ratio of each as a share of its own run's fio
          clat median (which cancels the machine's drift between the two runs).

Medians everywhere. Every fio run records other processes' CPU time (a 2-CPU machine shared
with a test suite moves IOPS far more than a tracer does) and foreign block_rq_* BPF programs;
the report flags both. Needs root, fio (libaio), bpftool, losetup, bcc, bpftrace (for that
tracer) and exporters/blockio/core/blockio.bpf.o (scripts/build-bpf.sh).

    sudo .venv/bin/python -m bench.blockio_overhead [--pairs 9] [--runtime 10] [--json out.json]

The package, by phase: common (settings, goals, BPF programs, /metrics samples), host (loop
device, bpf_stats, lock, fio, neighbours), tracers, iops, start, latency (the three parts),
report, and __main__ (preflight, the driver, the command line).
"""
