"""Reading the host, once for every exporter: bounded reads of /sys and /proc under injected
roots (read.py), a /sys tree walked inside its root (tree.py), the kernel's numbers
(numbers.py), PCI addresses and MSI vectors (pci.py), /proc/interrupts (interrupts.py), and the
block devices and network interfaces the agent exports, with their default filters
(blockdevs.py, netdevs.py). No exporter imports another exporter's module for these."""
