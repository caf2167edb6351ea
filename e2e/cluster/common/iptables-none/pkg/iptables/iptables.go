// Package iptables is the part of sigs.k8s.io/iptables-wrappers/pkg/iptables that the 1.38 kubelet links
// (pkg/kubelet/kubelet_network_linux.go), for carve's e2e control plane only. It reports a host without
// iptables: NewBestEffort finds no client, and the kubelet then logs "No iptables support on this system"
// and skips its KUBE-IPTABLES-HINT and KUBE-FIREWALL chains, as it does on an nftables-only host. The e2e
// kubelets share the development machine's network namespace, where those chains are not wanted anyway.
// Nothing else of the real module is provided: kube-proxy is not part of the e2e binary.
package iptables

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Chain, Table and RulePosition name iptables objects, as in the real package.
type (
	Chain        string
	Table        string
	RulePosition string
	// Mode says how the real package would pick the iptables binary; there is none here.
	Mode string
)

const (
	TableNAT    Table = "nat"
	TableFilter Table = "filter"
	TableMangle Table = "mangle"

	ChainInput  Chain = "INPUT"
	ChainOutput Chain = "OUTPUT"

	Prepend RulePosition = "-I"
	Append  RulePosition = "-A"

	UseInstalledMode Mode = "installed"
)

// Interface is the subset of the real Interface that the kubelet calls.
type Interface interface {
	EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error)
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error)
	IsIPv6() bool
	Protocol() v1.IPFamily
	Monitor(ctx context.Context, canary Chain, tables []Table, reloadFunc func(), interval time.Duration)
}

// NewBestEffort returns the iptables clients that work on this host, by IP family: none.
func NewBestEffort(_ context.Context, _ Mode) map[v1.IPFamily]Interface {
	return map[v1.IPFamily]Interface{}
}
