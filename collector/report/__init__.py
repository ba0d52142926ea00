"""`wattbit report`: the energy-per-gigabit report of a run, read from Prometheus."""
