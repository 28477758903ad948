// Command kueue runs Kueue's controllers, scheduler and admission webhooks
// (sigs.k8s.io/kueue, its packages unchanged) for ring-devcluster.
//
// Upstream's cmd/kueue is a main package (it cannot be imported) whose
// wiring assumes a pod in a real cluster: with internalCertManagement off it
// reads the metrics server's certificate from a fixed path under /etc/kueue
// and exits when that file is missing, and with it on it keeps a CA in a
// Secret and issues a serving certificate only for the webhook Service's DNS
// name. A loopback API server cannot route to a Service (no kube-proxy), so
// webhooks (admission and CRD conversion) are called by URL at 127.0.0.1,
// with a certificate for that address issued by the cluster CA (the
// configuration file's webhook.certDir). This entry point therefore differs
// in that wiring only: metrics are off, there is no leader election, no
// visibility API server, no MultiKueue, no ProvisioningRequest admission
// checks and no DRA; the configuration file (Kueue's own Configuration
// type, written by ringdevcluster/addons.py), the queue manager, the
// scheduler cache and scheduler, the core, Topology Aware Scheduling and
// job-framework controllers and the webhooks are upstream's own. Only the
// job integrations ring-controller serves are linked: JobSet and Trainer's
// TrainJob (others named in the configuration fail its validation).
package main

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"os"

	"go.uber.org/zap/zapcore"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	configapiv1beta1 "sigs.k8s.io/kueue/apis/config/v1beta1"
	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueuealpha "sigs.k8s.io/kueue/apis/kueue/v1alpha1"
	kueuev1beta1 "sigs.k8s.io/kueue/apis/kueue/v1beta1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	qcache "sigs.k8s.io/kueue/pkg/cache/queue"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/config"
	"sigs.k8s.io/kueue/pkg/constants"
	"sigs.k8s.io/kueue/pkg/controller/core"
	"sigs.k8s.io/kueue/pkg/controller/core/indexer"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	"sigs.k8s.io/kueue/pkg/controller/tas"
	tasindexer "sigs.k8s.io/kueue/pkg/controller/tas/indexer"
	"sigs.k8s.io/kueue/pkg/features"
	"sigs.k8s.io/kueue/pkg/metrics"
	"sigs.k8s.io/kueue/pkg/resources"
	"sigs.k8s.io/kueue/pkg/scheduler"
	preemptexpectations "sigs.k8s.io/kueue/pkg/scheduler/preemption/expectations"
	"sigs.k8s.io/kueue/pkg/util/kubeversion"
	"sigs.k8s.io/kueue/pkg/webhooks"

	// The job integrations this dev cluster runs (each registers itself).
	_ "sigs.k8s.io/kueue/pkg/controller/jobs/jobset"
	_ "sigs.k8s.io/kueue/pkg/controller/jobs/trainjob"
)

var log = ctrl.Log.WithName("setup")

func fail(err error, msg string, keysAndValues ...any) {
	log.Error(err, msg, keysAndValues...)
	os.Exit(1)
}

func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(schedulingv1.AddToScheme(scheme))
	utilruntime.Must(kueue.AddToScheme(scheme))
	utilruntime.Must(kueuev1beta1.AddToScheme(scheme))
	utilruntime.Must(kueuealpha.AddToScheme(scheme))
	utilruntime.Must(configapiv1beta1.AddToScheme(scheme))
	utilruntime.Must(configapi.AddToScheme(scheme))
	utilruntime.Must(jobframework.ForEachIntegration(func(_ string, cb jobframework.IntegrationCallbacks) error {
		if cb.AddToScheme != nil {
			return cb.AddToScheme(scheme)
		}
		return nil
	}))
	return scheme
}

func main() {
	configFile := flag.String("config", "", "Kueue's Configuration file (config.kueue.x-k8s.io/v1beta2)")
	featureGates := flag.String("feature-gates", "", "key=value pairs of Kueue feature gates")
	opts := zap.Options{TimeEncoder: zapcore.RFC3339NanoTimeEncoder}
	opts.BindFlags(flag.CommandLine)
	flag.Parse() // --kubeconfig is controller-runtime's own flag
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if *configFile == "" {
		fail(nil, "--config is required (webhook.certDir names the serving certificate's directory)")
	}

	scheme := newScheme()
	options, cfg, err := config.Load(scheme, *configFile)
	if err != nil {
		fail(err, "unable to load the configuration", "file", *configFile)
	}
	if err := config.LoadAndValidateFeatureGates(*featureGates, cfg.FeatureGates).ToAggregate(); err != nil {
		fail(err, "conflicting feature gates")
	}
	if err := config.Validate(&cfg, scheme).ToAggregate(); err != nil {
		fail(err, "invalid configuration")
	}
	if cfg.InternalCertManagement == nil || cfg.InternalCertManagement.Enable == nil || *cfg.InternalCertManagement.Enable {
		fail(nil, "internalCertManagement.enable must be false: the serving certificate comes from webhook.certDir")
	}
	features.LogFeatureGates(log)
	if err := config.AddWebhookSettingsTo(&options, &cfg); err != nil {
		fail(err, "unable to configure the webhook server")
	}
	options.Metrics = metricsserver.Options{BindAddress: "0"}
	options.LeaderElection = false
	metrics.Register()

	kubeConfig := ctrl.GetConfigOrDie()
	if *cfg.ClientConnection.QPS >= 0 {
		kubeConfig.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(*cfg.ClientConnection.QPS, int(*cfg.ClientConnection.Burst))
	}
	mgr, err := ctrl.NewManager(kubeConfig, options)
	if err != nil {
		fail(err, "unable to create the manager")
	}
	ctx := ctrl.SetupSignalHandler()

	formatter := resources.NewResourceFormatter()
	lqMetrics := metrics.NewLocalQueueMetricsConfig(cfg.Metrics.LocalQueueMetrics)
	cCache := schdcache.New(mgr.GetClient(),
		schdcache.WithResourceMetrics(cfg.Metrics.EnableClusterQueueResources),
		schdcache.WithLocalQueueMetrics(lqMetrics),
		schdcache.WithResourceFormatter(formatter),
	)
	requeuer := qcache.NewRequeuer()
	if err := mgr.Add(requeuer); err != nil {
		fail(err, "unable to add the requeuer")
	}
	expectations := preemptexpectations.New()
	queues := qcache.NewManager(mgr.GetClient(), cCache, requeuer,
		qcache.WithLocalQueueMetrics(lqMetrics),
		qcache.WithResourceMetrics(cfg.Metrics.EnableClusterQueueResources),
		qcache.WithResourceFormatter(formatter),
		qcache.WithPreemptionExpectations(expectations),
	)

	if err := setupIndexes(ctx, mgr, &cfg); err != nil {
		fail(err, "unable to set up the indexes")
	}
	discoveryClient, err := discovery.NewDiscoveryClientForConfig(kubeConfig)
	if err != nil {
		fail(err, "unable to create the discovery client")
	}
	versions := kubeversion.NewServerVersionFetcher(discoveryClient)
	if err := mgr.Add(versions); err != nil {
		fail(err, "unable to add the server version fetcher")
	}
	if err := versions.FetchServerVersion(); err != nil {
		fail(err, "unable to read the server's version")
	}

	if name, err := core.SetupControllers(mgr, queues, cCache, &cfg, core.SetupControllersOpts{
		PreemptionExpectations: expectations,
		ResourceFormatter:      formatter,
	}); err != nil {
		fail(err, "unable to create a core controller", "controller", name)
	}
	if features.Enabled(features.TopologyAwareScheduling) {
		if name, err := tas.SetupControllers(mgr, queues, cCache, &cfg, nil); err != nil {
			fail(err, "unable to create a TAS controller", "controller", name)
		}
	}
	namespaces, err := metav1.LabelSelectorAsSelector(cfg.ManagedJobsNamespaceSelector)
	if err != nil {
		fail(err, "invalid managedJobsNamespaceSelector")
	}
	if err := jobframework.SetupControllers(ctx, mgr, log,
		jobframework.WithManageJobsWithoutQueueName(cfg.ManageJobsWithoutQueueName),
		jobframework.WithWaitForPodsReady(cfg.WaitForPodsReady),
		jobframework.WithKubeServerVersion(versions),
		jobframework.WithEnabledFrameworks(cfg.Integrations.Frameworks),
		jobframework.WithManagerName(constants.KueueName),
		jobframework.WithLabelKeysToCopy(sets.New(cfg.Integrations.LabelKeysToCopy...)),
		jobframework.WithCache(cCache),
		jobframework.WithQueues(queues),
		jobframework.WithObjectRetentionPolicies(cfg.ObjectRetentionPolicies),
		jobframework.WithManagedJobsNamespaceSelector(namespaces),
	); err != nil {
		fail(err, "unable to create the job framework controllers")
	}
	if name, err := webhooks.Setup(mgr, nil); err != nil {
		fail(err, "unable to create a webhook", "webhook", name)
	}
	go queues.CleanUpOnContext(ctx)
	go cCache.CleanUpOnContext(ctx)

	sched := scheduler.New(queues, cCache, mgr.GetClient(), mgr.GetEventRecorder(constants.AdmissionName),
		scheduler.WithFairSharing(cfg.FairSharing),
		scheduler.WithAdmissionFairSharing(cfg.AdmissionFairSharing),
		scheduler.WithPreemptionExpectations(expectations),
		scheduler.WithResourceFormatter(formatter),
		// upstream's default: a resource no flavor covers blocks admission
		scheduler.WithQuotaCheckStrategy(configapi.QuotaCheckBlockUndeclared),
	)
	if err := mgr.Add(sched); err != nil {
		fail(err, "unable to add the scheduler")
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		fail(err, "unable to add the health check")
	}
	// Ready once the webhook server listens: before that, admission of the
	// managed jobs and of Kueue's own objects (and CRD conversion) fails.
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		if mgr.GetWebhookServer() == nil {
			return errors.New("no webhook server")
		}
		return mgr.GetWebhookServer().StartedChecker()(req)
	}); err != nil {
		fail(err, "unable to add the readiness check")
	}
	log.Info("starting the manager")
	if err := mgr.Start(ctx); err != nil {
		fail(err, "the manager stopped")
	}
}

// setupIndexes registers the field indexes the controllers list by: the
// core ones, TAS's, and those of the enabled job integrations.
func setupIndexes(ctx context.Context, mgr ctrl.Manager, cfg *configapi.Configuration) error {
	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if features.Enabled(features.TopologyAwareScheduling) {
		if err := tasindexer.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
			return err
		}
	}
	return jobframework.SetupIndexes(ctx, mgr.GetFieldIndexer(), jobframework.WithEnabledFrameworks(cfg.Integrations.Frameworks))
}
