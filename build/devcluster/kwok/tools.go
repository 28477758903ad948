//go:build tools

// Package tools pins the kwok command this module builds.
package tools

import _ "sigs.k8s.io/kwok/pkg/kwok/cmd"
