"""The core blockio backend: a CO-RE BPF program reading the kernel's request timestamps."""
