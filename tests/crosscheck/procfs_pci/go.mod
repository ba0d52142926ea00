module wattbit/tests/crosscheck/procfs_pci

go 1.24.0

require github.com/prometheus/procfs v0.19.2

require golang.org/x/sync v0.17.0 // indirect
