// Stands in for sigs.k8s.io/iptables-wrappers in the 1.38 e2e binary only (e2e/cluster/1.38/go.mod replaces
// the module with this directory): the Go module proxy answers 403 for the real module (docs/e2e.md).
module sigs.k8s.io/iptables-wrappers

go 1.24
