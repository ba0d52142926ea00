// Command procfs_pci prints what github.com/prometheus/procfs (sysfs.PciDevices) reads from
// a /sys tree, as JSON: the independent reader of tests/integration/test_pcie_procfs.py.
//
//	go run . /path/to/sys
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/prometheus/procfs/sysfs"
)

type device struct {
	Parent           string   `json:"parent"`
	Class            uint32   `json:"class"`
	MaxLinkSpeed     *float64 `json:"max_link_speed"`
	MaxLinkWidth     *float64 `json:"max_link_width"`
	CurrentLinkSpeed *float64 `json:"current_link_speed"`
	CurrentLinkWidth *float64 `json:"current_link_width"`
}

// address formats a location as the kernel names the device: 0000:01:00.0.
func address(l sysfs.PciDeviceLocation) string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", l.Segment, l.Bus, l.Device, l.Function)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: procfs_pci SYSFS_ROOT")
		os.Exit(2)
	}
	fs, err := sysfs.NewFS(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	devices, err := fs.PciDevices()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := map[string]device{}
	for _, d := range devices {
		parent := ""
		if d.ParentLocation != nil {
			parent = address(*d.ParentLocation)
		}
		out[address(d.Location)] = device{
			parent, d.Class, d.MaxLinkSpeed, d.MaxLinkWidth, d.CurrentLinkSpeed, d.CurrentLinkWidth,
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
