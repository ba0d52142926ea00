"""The tcp exporter: every TCP socket's tcp_info over sock_diag, summed under a bounded flow key."""
