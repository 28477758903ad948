// Command pause is the dev node's pod sandbox process (the kubelet's "pause"
// container), built here because there is no registry to pull one from. Like
// upstream's pause (a few lines of C in kubernetes/build/pause), it holds the
// pod's namespaces open, reaps any zombie it inherits as PID 1 and exits 0 on
// SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
