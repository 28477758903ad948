// Command trainer runs Kubeflow Trainer v2's controllers and admission
// webhooks (github.com/kubeflow/trainer/v2, its packages unchanged) for
// ring-devcluster.
//
// Upstream's cmd/trainer-controller-manager builds with this module too, but
// its wiring assumes a pod in a real cluster: an in-process certificate
// rotator that keeps a CA in a Secret in kubeflow-system, issues a serving
// certificate only for the webhook Service's DNS name and writes it to the
// fixed directory /tmp/k8s-webhook-server/serving-certs, and a webhook server
// on all interfaces. A loopback API server cannot route to a Service (no
// kube-proxy), so webhooks must be called by URL at 127.0.0.1, with a
// certificate for that address. This entry point therefore differs only in
// that wiring: the serving certificate comes from --webhook-cert-dir (issued
// by the cluster CA), the webhook server binds --webhook-host, metrics are
// off. The runtimes, the TrainJob/runtime controllers and the validating
// webhooks are upstream's own (runtimecore.New, controller.SetupControllers,
// webhooks.Setup).
package main

import (
	"flag"
	"os"

	apiruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlpkg "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/controller"
	runtimecore "github.com/kubeflow/trainer/v2/pkg/runtime/core"
	"github.com/kubeflow/trainer/v2/pkg/webhooks"
)

func fail(err error, msg string, keysAndValues ...any) {
	ctrl.Log.WithName("setup").Error(err, msg, keysAndValues...)
	os.Exit(1)
}

func main() {
	probeAddr := flag.String("health-probe-bind-address", "127.0.0.1:8081", "address of /healthz and /readyz")
	webhookHost := flag.String("webhook-host", "127.0.0.1", "address the webhook server binds to")
	webhookPort := flag.Int("webhook-port", 9443, "port of the webhook server")
	certDir := flag.String("webhook-cert-dir", "", "directory holding the webhook server's tls.crt and tls.key")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse() // --kubeconfig is controller-runtime's own flag
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if *certDir == "" {
		fail(nil, "--webhook-cert-dir is required")
	}

	scheme := apiruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(trainer.AddToScheme(scheme))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(scheme))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		WebhookServer:          webhook.NewServer(webhook.Options{Host: *webhookHost, Port: *webhookPort, CertDir: *certDir}),
		HealthProbeBindAddress: *probeAddr,
	})
	if err != nil {
		fail(err, "unable to create the manager")
	}
	ctx := ctrl.SetupSignalHandler()
	runtimes, err := runtimecore.New(ctx, mgr.GetClient(), mgr.GetFieldIndexer())
	if err != nil {
		fail(err, "unable to initialise the runtimes")
	}
	if name, err := controller.SetupControllers(mgr, runtimes, ctrlpkg.Options{}); err != nil {
		fail(err, "unable to create a controller", "controller", name)
	}
	if name, err := webhooks.Setup(mgr, runtimes); err != nil {
		fail(err, "unable to create a webhook", "webhook", name)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		fail(err, "unable to add the health check")
	}
	// Ready once the webhook server listens: before that, TrainJob and
	// runtime admission would fail.
	if err := mgr.AddReadyzCheck("readyz", mgr.GetWebhookServer().StartedChecker()); err != nil {
		fail(err, "unable to add the readiness check")
	}
	if err := mgr.Start(ctx); err != nil {
		fail(err, "the manager stopped")
	}
}
