//go:build tools

// Package tools pins the Prometheus commands this module builds: the server
// (cmd/prometheus, the dev cluster's scraper) and promtool (the alert rules'
// checks and unit tests). Both are built with the build tags
// remove_all_sd,enable_kubernetes_sd so only the Kubernetes service discovery
// (and the always-present file and HTTP ones) is compiled in; without
// builtinassets the web UI is absent but the HTTP API works.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
