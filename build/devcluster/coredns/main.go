// Command coredns runs CoreDNS (github.com/coredns/coredns, its packages
// unchanged) with only the plugins the dev cluster's Corefile uses: kubeadm's
// stock set (errors, health, ready, kubernetes, prometheus, cache, loop,
// reload, loadbalance) plus bind (serve the node's bridge address only) and
// log (for debugging). Upstream's main imports core/plugin, which registers
// every plugin, cloud back-ends included; this one registers these and sets
// the directive order to upstream's own order restricted to them.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// registered are the directives of the plugins imported above.
var registered = map[string]bool{
	"bind": true, "cache": true, "errors": true, "health": true, "kubernetes": true, "loadbalance": true,
	"log": true, "loop": true, "prometheus": true, "ready": true, "reload": true,
}

func main() {
	order := make([]string, 0, len(registered))
	for _, d := range dnsserver.Directives {
		if registered[d] {
			order = append(order, d)
		}
	}
	dnsserver.Directives = order
	coremain.Run()
}
