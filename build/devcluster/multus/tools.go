//go:build tools

// Package tools pins the Multus thin plugin, the package this module builds
// (gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus).
package tools

import _ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus"
