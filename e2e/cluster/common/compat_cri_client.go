// The calls of common/main.go whose API differs by minor, as 1.31 and later have them: the kubelet command
// takes a context, and the fake CRI runtime lives in k8s.io/cri-client (split out of k8s.io/kubernetes in 1.31).
package main

import (
	"context"

	"k8s.io/component-base/cli"
	"k8s.io/cri-client/pkg/fake"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

type fakeRuntime = fake.RemoteRuntime

func newFakeRuntime() *fakeRuntime { return fake.NewFakeRemoteRuntime() }

func runKubelet() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) }
