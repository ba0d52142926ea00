"""A site's fleet on one machine: N hosts and N/5 PDUs scraped every 15 s by Prometheus, and by
vmagent into VictoriaMetrics (rules by vmalert). What the store costs per series and per host.

Run: .venv/bin/python -m bench.fleet [--hosts 50,100,200] [--json FILE]   (~25 min)
     .venv/bin/python -m bench.fleet --quick                            (smoke run, < 2 min)

Everything runs on 127.0.0.1, in a temporary directory, each process in a session of its own
with a parent-death signal, and is stopped on the way out (Ctrl-C included). The measuring runs
hold /tmp/wattbit-bench.lock (others benchmark on this machine too; `flock` it for yours).

* **Hosts: SIMULATED, one recorded exposition served N times.** At start the bench renders a
  48-disk host's /metrics through the agent's own code path — collector/agent/main.py's
  registry (the exporters' health, the process collector) and the agent's renderer over
  tests/support/synthetic.py's synthetic blockio (48 disks x 4 ops, every histogram filled) and nic
  (8 NICs x 16 queues, 64 CPUs) content — so the content follows the current code (bucket
  layouts, labels). A simulator process (`--serve`, one asyncio loop) serves it on one port
  per host with every counter, histogram bucket and sum advancing each second (integers by
  integers, buckets staying cumulative): nearly every series changes every scrape, a busy
  fleet and the worst case for compression. Counters of trouble (errors, drops, retransmits,
  timeouts) are 0 and still: a healthy fleet, whose alerts group evaluates rather than fires
  (the phase records which alerts were pending or firing). All hosts serve the same values;
  the `host` label comes from the scrape configuration (`labels: {host: moverNNN}`, as in
  deploy/prometheus).
* **PDUs: SIMULATED, polled by a real collector.** One PDU per --hosts-per-pdu (5) hosts, each
  a UDP port of the same simulator answering from the demo's APC AP8641 recording
  (collector/pdu/responder.py); a real `wattbit collector` polls them every 15 s (profile
  named), its outlets 1-10 mapped two by two to the PDU's five hosts, so the rules' joins of
  watts and traffic have data. It also holds the run registry: each phase is a run, and
  `wattbit report` reads it back from the store.
* **Stores**, one at a time, each from an empty data directory, the order alternating from one
  N to the next: Prometheus 2.42 (scrape 15 s, rules alerts/wattbit-recording.yml and
  alerts/wattbit-alerts.yml evaluated every 15 s); VictoriaMetrics 1.79 single node fed by
  vmagent (the same scrape configuration) with vmalert evaluating the same two files against
  it and writing the recorded series back to it (`-search.maxUniqueTimeseries` raised so that
  rules and the report may touch every series of 200 hosts).

Per phase: the targets all up, a warm-up (--warmup), then a measured window (--measure) with
RSS sampled every 5 s (the window's peak is reported) and CPU from /proc/PID/stat over the
window (cores = CPU seconds / wall seconds), per process; samples ingested per second from the
store's own counter (Prometheus `prometheus_tsdb_head_samples_appended_total`; VictoriaMetrics
`vm_rows_inserted_total`; both include recorded rule results); rule evaluation time per group
(Prometheus `prometheus_rule_group_last_duration_seconds` sampled, median, and its five
costliest rules; vmalert `vmalert_iteration_duration_seconds` sum / count over the window).
The phase's run (from the warm-up's start to 30 s before the window's end, as VictoriaMetrics
shows samples 30 s late by default) then goes through `wattbit report` against the store,
--reports times (default 1: a report over 200 hosts takes ~1.5 min): the median wall time of
the command line, and the report's own analysis time. Series are the store's
`sum(scrape_samples_scraped)`. Ingest "kept up" when every target was up and the ingest rate
is at least 90 % of series / interval; rules "kept up" when no evaluation was missed or failed.
Each phase also records the CPU the rest of the machine used meanwhile (other users' work).

At the end: per store, least-squares lines of RSS and CPU against series (and per host), and
the JSON (--json) with every figure. docs/scaling.md reads these numbers.
"""
