// k8s-testbed is one multi-call binary for the e2e testbed, so that the long compile and link of the
// Kubernetes control plane is shared: `k8s-testbed etcd|kube-apiserver|kube-controller-manager [flags]`.
// It can also be called through a symlink named after the subcommand.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // CronJob time zones, as in the upstream mains

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go prometheus plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric registration
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: k8s-testbed etcd|kube-apiserver|kube-controller-manager [flags]")
	os.Exit(2)
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	switch name {
	case "etcd", "kube-apiserver", "kube-controller-manager":
	default:
		if len(args) == 0 {
			usage()
		}
		name, args = args[0], args[1:]
	}
	switch name {
	case "etcd":
		os.Exit(runEtcd(args))
	case "kube-apiserver":
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kube-controller-manager":
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "version", "--version":
		fmt.Println("k8s-testbed (kube-apiserver, kube-controller-manager, embedded etcd)")
		os.Exit(0)
	default:
		usage()
	}
}

func urls(s string) ([]url.URL, error) {
	var out []url.URL
	for _, p := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		out = append(out, *u)
	}
	return out, nil
}

// runEtcd runs a single-member embedded etcd until SIGTERM/SIGINT.
func runEtcd(args []string) int {
	fs := flag.NewFlagSet("etcd", flag.ExitOnError)
	name := fs.String("name", "testbed", "member name")
	dataDir := fs.String("data-dir", "", "data directory (required)")
	client := fs.String("listen-client-urls", "http://127.0.0.1:2379", "client URLs (comma separated)")
	peer := fs.String("listen-peer-urls", "http://127.0.0.1:2380", "peer URLs (comma separated)")
	metrics := fs.String("listen-metrics-urls", "", "metrics/health URLs (comma separated, optional)")
	logLevel := fs.String("log-level", "warn", "debug|info|warn|error")
	noFsync := fs.Bool("unsafe-no-fsync", false, "disable fsync (faster, loses data on a crash)")
	quota := fs.Int64("quota-backend-bytes", 2<<30, "backend quota")
	_ = fs.Parse(args)
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		return 2
	}

	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dataDir
	cfg.LogLevel = *logLevel
	cfg.LogOutputs = []string{"stderr"}
	cfg.UnsafeNoFsync = *noFsync
	cfg.QuotaBackendBytes = *quota
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"
	// NewConfig leaves this at 0, which logs every request as "expensive".
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	var err error
	if cfg.ListenClientUrls, err = urls(*client); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 2
	}
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	if cfg.ListenPeerUrls, err = urls(*peer); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 2
	}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	if *metrics != "" {
		if cfg.ListenMetricsUrls, err = urls(*metrics); err != nil {
			fmt.Fprintln(os.Stderr, "etcd:", err)
			return 2
		}
	}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "dfe-archiver-testbed"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd: start:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(os.Stderr, "etcd: ready, serving clients on %s\n", *client)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		fmt.Fprintln(os.Stderr, "etcd: not ready after 60s")
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	select {
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "etcd: signal received, shutting down")
		return 0
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd: error:", err)
		return 1
	}
}
