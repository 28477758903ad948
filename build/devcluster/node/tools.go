//go:build tools

// Package tools pins the k8s.io/kubernetes node commands this module builds
// (the kubelet and kube-proxy of the control plane's release), so that
// `go mod tidy` keeps their dependencies in go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
)
