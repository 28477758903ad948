// Command trainer runs Kubeflow Trainer v2's controllers and admission
// webhooks (github.com/kubeflow/trainer/v2, its packages unchanged) for
// ring-devcluster.
//
// Upstream's cmd/trainer-controller-manager builds with this module too, but
// its wiring assumes a pod in a real cluster. Since v2.3.0 its configuration
// file can switch the in-process certificate rotator off and set the webhook
// host and port, yet not the directory the webhook server reads its
// certificate from (controller-runtime's default under $TMPDIR), and with the
// rotator on it keeps a CA in a Secret in kubeflow-system and issues a serving
// certificate only for the webhook Service's DNS name. A loopback API server
// cannot route to a Service (no kube-proxy), so webhooks must be called by URL
// at 127.0.0.1, with a certificate for that address. This entry point
// therefore differs only in that wiring: the configuration is upstream's
// defaults (config.Load without a file: client QPS, runtimes' settings), the
// serving certificate comes from --webhook-cert-dir (issued by the cluster
// CA), the webhook server binds --webhook-host, metrics are off, there is no
// leader election. The runtimes, the TrainJob/runtime controllers and the
// defaulting and validating webhooks are upstream's own (runtimecore.New,
// controller.SetupControllers, webhooks.Setup). The TrainJobStatus feature
// (alpha, off by default) and its status server are not wired.
package main

import (
	"flag"
	"os"

	apiruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlpkg "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	configapi "github.com/kubeflow/trainer/v2/pkg/apis/config/v1alpha1"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/config"
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

	// The same scheme as upstream's entry point (Volcano's PodGroup for its
	// gang-scheduling plugin, the configuration API for the defaults below).
	scheme := apiruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(configapi.AddToScheme(scheme))
	utilruntime.Must(trainer.AddToScheme(scheme))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(scheme))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(scheme))
	utilruntime.Must(volcanov1beta1.AddToScheme(scheme))

	// Upstream's defaults, then the loopback wiring in place of theirs.
	options, cfg, err := config.Load(scheme, "")
	if err != nil {
		fail(err, "unable to load the default configuration")
	}
	options.Metrics = metricsserver.Options{BindAddress: "0"}
	options.WebhookServer = webhook.NewServer(webhook.Options{Host: *webhookHost, Port: *webhookPort, CertDir: *certDir})
	options.HealthProbeBindAddress = *probeAddr
	options.LeaderElection = false

	restCfg := ctrl.GetConfigOrDie()
	config.ApplyClientConnection(restCfg, &cfg)
	mgr, err := ctrl.NewManager(restCfg, options)
	if err != nil {
		fail(err, "unable to create the manager")
	}
	ctx := ctrl.SetupSignalHandler()
	runtimes, err := runtimecore.New(ctx, mgr.GetClient(), mgr.GetFieldIndexer(), &cfg)
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
