// Command kubeadm is the upstream kubeadm, for the offline kind node image.
package main

import (
	"k8s.io/kubernetes/cmd/kubeadm/app"
	utilerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
)

func main() { utilerrors.HandleError(app.Run()) }
