"""PCIe links, disk link rates and storage-controller interrupts (docs/exporters/pcie.md)."""
