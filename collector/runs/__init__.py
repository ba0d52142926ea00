"""Runs: the registry the site collector keeps, its HTTP API, and the `wattbit run` client."""
