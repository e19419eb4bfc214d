// Command etcd is the etcd server at the version Kubernetes pins for itself,
// built from its Go module so the local control plane needs no downloads.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
