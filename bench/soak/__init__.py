"""Soak of the site collector and the agent under hostile peers (not in CI: it runs for long).

    .venv/bin/python -m bench.soak [--minutes 30] [--pdus 100] [--slow-clients 200] [--out FILE]

Everything runs on 127.0.0.1, each process in a session of its own (with a parent-death signal),
and is stopped on the way out, Ctrl-C included:

* a PDU farm (`farm.py`, a child process): one asyncio loop serving --pdus SIMULATED APC rPDU2
  PDUs, a
  UDP port each, through the demo's responder (collector/pdu/responder.py), from the real
  AP8641 recording (half with its 24 outlets, half extended to 48 as bench/pdu_poll.py does).
  Every answer carries the time it was made in the PDU's energy register
  (rPDU2DeviceStatusEnergy, a tenth of a second a unit), so the collector's
  wattbit_pdu_energy_joules_total says when it last read that PDU;
* --healthy-bmcs (default 2) healthy Redfish BMCs: sushy-static serving the real mockups of
  tests/fixtures/bmc (bench/soak/bmcs.py);
* a real `wattbit collector` polling all of them (--interval, --concurrency, PDUs with timeout
  2 s and 1 retry, BMCs with their defaults) and a real `wattbit agent` (blockio backend
  --agent-blockio: eBPF as root, and nic);
* a well-behaved scraper (this process) getting both /metrics every --scrape-every seconds on
  kept-alive connections, as Prometheus does, timing each scrape (a failed one counts with the
  time it took).

Phases: a warm-up (every PDU read twice; not measured), an idle phase (--idle-minutes, default
10 % of --minutes and at least one minute: every PDU healthy, no attack), then the attack until
--minutes have passed:

* a fifth of the PDUs turn hostile: dead (port closed, so ICMP refused; or a blackhole), slow
  (answers 1.5 s, 2.4 s or 5 s late, against the 2 s timeout) or garbage (answers cut in half,
  or random bytes);
* an attacker process (`attack.py`, niced: at a site the attackers have CPUs of their own) keeps
  --slow-clients slowloris connections (half on each server, all on the collector when the
  agent serves HTTPS, below: request headers trickled a byte
  a second, reconnecting when dropped), --idle-clients connections that never send a byte,
  --body-clients requests that announce a body and never send it (GET /metrics and, on the
  collector, POST /api/v1/runs; shared out the same way; issue 34), reconnecting when answered,
  and floods the collector's SNMP socket (found through /proc/PID/fd and /proc/PID/net/udp)
  with --flood-pps SNMP datagrams, half from a port of its own and half, as root (raw socket),
  spoofed from the good PDUs' addresses.

* with --stalled-tls N (default 1000; 0 turns it off), the agent serves HTTPS (a self-signed
  certificate; the scraper checks it) and this process keeps rounds of N connections to it
  that send 6 bytes of a ClientHello and stall --stalled-tls-hold s (bench/tls_stall.py);
* with --churn (root), loop devices and veth pairs are created, written to (O_DIRECT) or
  brought up, and destroyed every --churn-every s (--churn-loops, --churn-veths a cycle), so
  the agent sees disks and NICs come and go for the whole attack; the agent's series count on
  /metrics per phase says whether gone ones leave.

* --hostile-bmcs (default 1) hostile BMCs appear on ports the collector has polled (refused)
  since its start: tests/support/hostilebmc.py in the modes of --hostile-bmc-modes, in turn
  (default: bloat, i.e. every document padded to just under 4 MiB of [{},{},...], then
  strings, session:forbid-one, drip, session:slow-login); they go with the attacker.

Then, beyond --minutes, a recovery phase (--recovery-minutes, default as long as the idle one):
the attacker gone and every PDU healthy again (the refused ones on their old ports), to see the
servers' fds come back down, the hostile PDUs read again, and /metrics latency once more without
an attack (a control for the machine's own drift).

Every --sample-every seconds: fds, threads, RSS and CPU of both servers, and the drops of the
collector's UDP sockets. At the end, printed and written to --out as JSON: fds, threads and RSS
when the attack is in full swing (after a ramp) and at its end, their maxima and slopes per
10 minutes (least squares over the attack after the ramp); polls of good PDUs missed (two reads
more than 1.5 intervals apart) and the poll cycles in which any good PDU was stale; the failure
counters of every PDU by reason; /metrics p50/p99 idle, under attack and in recovery for each
server; how soon the hostile PDUs came back; exit codes after SIGTERM and processes left over.
Slopes from a short run (a steady window under 10 minutes) are mostly noise.

For the BMCs (issue 34): the healthy ones' last successful poll age per phase (from the
collector's wattbit_bmc_up and wattbit_bmc_last_poll_timestamp_seconds), the collector's peak
RSS (VmHWM) before the hostile BMCs and at the end, each BMC's failures by reason.

Goals (the issue's): fds, threads and RSS flat (slope at most FLAT per 10 minutes); every good
PDU fresh every cycle (no missed poll, never down, no failure counted); /metrics p99 under attack
at most twice the idle p99, for each server. Also checked: both exit 0 on SIGTERM and nothing is
left running. BMCs: every healthy one read within two intervals at every scrape, never down,
no failure; the collector's peak RSS under 200 MiB with one hostile BMC, 300 with more; no
failed collector scrape while they run, and each one's series on every page.

The package, by phase: common (settings, goals, /proc readings, numbers), farm and attack (the
two child processes, each `python -m bench.soak.NAME SPEC.json`), actors (the main process's
scraper, sampler, stalled TLS, churn and child-process helpers), bmcs (the BMC side: its
processes, configuration, what /metrics says of it, its figures), analysis (the numbers, the
goals, the report) and __main__ (the command line and the phases).
"""
