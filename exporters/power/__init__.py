"""The power exporter: CPU energy from RAPL (powercap) and hwmon power and energy sensors."""
