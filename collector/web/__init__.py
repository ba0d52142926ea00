"""HTTP for the agent and the collector: the server, its web config (TLS, basic auth), /metrics."""
