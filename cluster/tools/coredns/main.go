// Command coredns is CoreDNS with only the plugins the real node's cluster DNS uses (cluster/node-lib.sh): pod and
// Service names from the API (kubernetes), everything else to the host's resolver (forward), and the plugins that
// bind, log and report readiness. Fewer plugins than CoreDNS's default build, so it builds in a fraction of the time
// and needs none of the cloud providers' SDKs.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
