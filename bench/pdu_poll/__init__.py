"""One full poll of many APC rPDU2 PDUs: wattbit vs prometheus-snmp-exporter 0.21 vs net-snmp.

Run: .venv/bin/python -m bench.pdu_poll [--pdus 100] [--rounds 5] [--json FILE]
     [--agents 4] [--concurrency 32] [--profile 30]

The PDUs are SIMULATED: synthetic recordings derived from the real APC AP8641 recording
(`apc_ap8641.snmprec`: its system group and whole rPDU2 branch, identity and unit rows
included), half of them with its 24 outlets and half extended to 48 outlets (new rows
25..48 in every rPDU2 outlet table, metered values copied from outlet i-24 and scaled by a
seeded factor of 0.7..1.3; the outlet counts, table sizes and the unit's power, energy and
current scaled to match). They are served by `--agents` snmpsim processes (single-threaded
Python, each with its own UDP port, one community per PDU = data file stem), PDU i on
process i % agents. snmpsim answers far slower than a real PDU's agent and shares this
machine's CPUs with the tool being measured, so it may bound the wall times: the table shows
the agents' CPU seconds and the machine's CPU use during each poll.

Compared, on exactly the same agents and the same 12 subtrees (the apc_rpdu2 profile's walk
roots; GETBULK max-repetitions 25, timeout 2 s, 1 retry), in round-robin order rotated every
round:

* wattbit: `PduPoller.poll_all()` in this process, profile `apc_rpdu2` configured (no
  detection), concurrency 32; CPU = this process's `time.process_time()` during the poll.
  Its GETBULKs ask for at most 25 var-binds in all; from its second poll on it walks short
  subtrees side by side and sizes every request from the lengths the previous poll found, as
  the collector does from its second poll on. The untimed warm-up poll is wattbit's first (its
  wall and CPU are printed: first-access costs of the agents also land in it).
* snmp_exporter: prometheus-snmp-exporter 0.21 with the hand-written module
  `bench/pdu_poll/snmp_exporter_module.yml` (copied once per community: 0.21 keeps the
  community inside the module), all targets scraped by 32 threads; CPU = the exporter's
  utime+stime from /proc/PID/stat (10 ms ticks). The scraping threads' own CPU is not counted.
* net-snmp: one `snmpbulkwalk -v2c -Cr25` per subtree and PDU (it walks one subtree per run),
  a PDU's subtrees one after the other, 32 PDUs at a time; CPU = the children's rusage.

Values: per PDU, outlets x outlet metrics present (current, power, energy) + the 4 unit metrics
(device power, device energy, phase current, phase voltage); for snmp_exporter and net-snmp
the samples / rows of those same 7 columns. Every poll is checked (all PDUs answered, outlets
per PDU = 24 or 48, values and the sum of outlet power as in the recordings) before its time
counts; a check failure aborts the run.

Goals: wattbit <= 60 CPU us per exported value; wattbit wall time no worse than snmp_exporter.
"""
