// Command kubectl is the Kubernetes command-line client of k8s.io/kubectl,
// built at the control plane's release (v0.35.4 is Kubernetes v1.35.4), so
// tests and operators can `kubectl apply -k` the kustomize base against the
// dev cluster. The kube wrapper module builds only the server binaries; this
// separate module keeps that module's cache key (and its long build) as is.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// RunNoErrOutput leaves error printing to CheckErr, which formats API
	// errors the way kubectl users know and sets the exit code.
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
