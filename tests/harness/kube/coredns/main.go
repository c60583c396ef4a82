// CoreDNS for scripts/cluster, with only the plugins its Corefile uses
// (tests/harness/cluster/components.py): the kubernetes plugin answers cluster names, and
// nothing forwards. Built from the CoreDNS Go module by scripts/build-kube-tools; leaving
// out the other plugins (cloud DNS providers, etcd, tracing, ...) leaves out their SDKs,
// which made up most of a full `go install github.com/coredns/coredns` build.
package main

import (
	"fmt"
	"os"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// In CoreDNS's own order (plugin.cfg): a request passes the plugins in this order.
var directives = []string{"bind", "ready", "health", "errors", "cache", "kubernetes"}

func main() {
	if err := dnsserver.SetDirectives(directives); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	coremain.Run()
}
