// Command etcd runs the etcd server: the same entry point as the upstream etcd
// binary (etcdmain.Main), built from the published server module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
