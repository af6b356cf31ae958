// Command etcd is the etcd server that pairs with the Kubernetes version of this module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
