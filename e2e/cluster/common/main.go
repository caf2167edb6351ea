// Command k8s is the control plane of one Kubernetes release as a multi-call binary for carve's e2e:
// `k8s <component> [flags]`, one component per process (the components keep process-global flags,
// klog and feature gates, so they must not share a process). This one file builds every minor: each
// e2e/cluster/<minor>/ module links it as main.go, its go.mod pins the release, and its compat.go (a link to
// one of this folder's compat_*.go) holds the few calls whose API changed between minors. fakecri is the
// fallback container runtime (docs/e2e.md says why).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"google.golang.org/grpc"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "time/tzdata"
)

const usage = "usage: k8s apiserver|scheduler|controller-manager|kubelet|etcd|fakecri [flags]"

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name == "k8s" || strings.HasPrefix(name, "k8s-") {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	// Every component parses os.Args[1:]: drop the component word.
	os.Args = append([]string{name}, args...)
	switch strings.TrimPrefix(name, "kube-") {
	case "apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kubelet":
		os.Exit(runKubelet())
	case "etcd":
		etcdmain.Main(os.Args)
	case "fakecri":
		os.Exit(runFakeCRI(args))
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
}

// recordingRuntime is the upstream fake CRI runtime plus a record of every container it is asked to
// create: the CDI device names, env and mounts the kubelet passes are what a real runtime would apply.
type recordingRuntime struct {
	*fakeRuntime
	mu     sync.Mutex
	record *os.File
}

type createdContainer struct {
	Namespace  string            `json:"namespace"`
	Pod        string            `json:"pod"`
	Container  string            `json:"container"`
	CDIDevices []string          `json:"cdiDevices"`
	Env        map[string]string `json:"env"`
	Mounts     []string          `json:"mounts"`
}

func (r *recordingRuntime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	entry := createdContainer{Env: map[string]string{}}
	if sb := req.GetSandboxConfig().GetMetadata(); sb != nil {
		entry.Namespace, entry.Pod = sb.GetNamespace(), sb.GetName()
	}
	cfg := req.GetConfig()
	entry.Container = cfg.GetMetadata().GetName()
	for _, d := range cfg.GetCDIDevices() {
		entry.CDIDevices = append(entry.CDIDevices, d.GetName())
	}
	for _, kv := range cfg.GetEnvs() {
		entry.Env[kv.GetKey()] = text(kv.GetValue())
	}
	for _, m := range cfg.GetMounts() {
		entry.Mounts = append(entry.Mounts, m.GetHostPath()+":"+m.GetContainerPath())
	}
	line, err := json.Marshal(entry)
	if err == nil {
		r.mu.Lock()
		_, err = r.record.Write(append(line, '\n'))
		r.mu.Unlock()
	}
	if err != nil {
		return nil, fmt.Errorf("fakecri: recording container %s: %w", entry.Container, err)
	}
	return r.fakeRuntime.CreateContainer(ctx, req)
}

// text reads a CRI env value: a string up to 1.35, bytes from 1.36.
func text[T string | []byte](v T) string { return string(v) }

func runFakeCRI(args []string) int {
	fs := flag.NewFlagSet("fakecri", flag.ContinueOnError)
	socket := fs.String("socket", "", "unix socket path to serve the CRI on")
	recordPath := fs.String("record", "", "file to append one JSON line per CreateContainer to")
	if err := fs.Parse(args); err != nil || *socket == "" || *recordPath == "" {
		fmt.Fprintln(os.Stderr, "usage: k8s fakecri --socket PATH --record FILE")
		return 2
	}
	record, err := os.OpenFile(*recordPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rt := &recordingRuntime{fakeRuntime: newFakeRuntime(), record: record}
	rt.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	// The kubelet refuses an image without a size ("pulled" images are made by the fake on PullImage).
	rt.ImageService.SetFakeImageSize(1 << 20)
	// The kubelet takes its cgroup driver from the runtime; the zero value would be systemd.
	rt.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{
		CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS,
	}
	_ = os.Remove(*socket)
	lis, err := net.Listen("unix", *socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	server := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(server, rt)
	runtimeapi.RegisterImageServiceServer(server, rt)
	if err := server.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
