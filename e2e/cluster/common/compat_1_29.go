// The calls of common/main.go whose API differs by minor, as 1.29 has them: the kubelet command takes no
// context, and the fake CRI runtime is still inside k8s.io/kubernetes (k8s.io/cri-client came in 1.31).
package main

import (
	"k8s.io/component-base/cli"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
	"k8s.io/kubernetes/pkg/kubelet/cri/remote/fake"
)

type fakeRuntime = fake.RemoteRuntime

func newFakeRuntime() *fakeRuntime { return fake.NewFakeRemoteRuntime() }

func runKubelet() int { return cli.Run(kubelet.NewKubeletCommand()) }
