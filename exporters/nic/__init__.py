"""Per-interface, per-queue, IRQ/CPU and TCP network telemetry."""
