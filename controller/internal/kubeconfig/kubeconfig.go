// Package kubeconfig loads the Kubernetes client configuration of peer discovery,
// with its client limits: one place for both, used by the epp binary and by
// discovery embedded in another program.
package kubeconfig

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
)

// Client limits: a replica lists and watches one Service's slices, a handful of
// requests per (re)connection, so these only bound a misbehaving loop.
const (
	QPS   = 5
	Burst = 10
)

// UserAgent is the user agent of peer discovery's requests.
const UserAgent = "epp-peer-discovery"

// Load loads the configuration in controller-runtime's order: the kubeconfig file
// given (the --kubeconfig flag), else the --kubeconfig flag controller-runtime
// registers (when the program parsed it), $KUBECONFIG, the in-cluster
// configuration, ~/.kube/config. The client limits are set.
func Load(path string) (*rest.Config, error) {
	if path != "" {
		c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig=%s: %w", path, err)
		}
		return WithClientLimits(c), nil
	}
	c, err := ctrlconfig.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes API: no --kubeconfig, $KUBECONFIG, in-cluster config or ~/.kube/config: %w", err)
	}
	return WithClientLimits(c), nil
}

// WithClientLimits returns a copy of c with peer discovery's QPS, burst and user
// agent.
func WithClientLimits(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	c.QPS, c.Burst = QPS, Burst
	c.UserAgent = UserAgent
	return c
}
