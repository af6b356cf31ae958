package podwatch

import (
	"errors"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/kubewatch"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// SourceName is the source's name (/debug/peers "source").
const SourceName = "pod"

// SelectorSetting selects the source: the label selector of the EPP's own pods.
var SelectorSetting = discovery.Setting{Param: "selector", Flag: "epp-peer-pod-selector", Env: []string{"EPP_PEER_POD_SELECTOR"},
	Usage: "Label selector of the EPP's own pods (e.g. app.kubernetes.io/name=epp); the pods it selects in the namespace are the peers, read from the Pod API (a Role with get, list and watch on pods)."}

// Permissions are what the source needs in its namespace.
var Permissions = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}

// Spec is the source for the epp binary (--epp-peer-pod-selector=<selector>) and
// the EPP plugin pod-peer-discovery (parameter selector), with the shared
// namespace, port name (a container port's), port and membership settings.
func Spec() discovery.SourceSpec {
	return discovery.SourceSpec{
		Name:        SourceName,
		Select:      SelectorSetting,
		Placeholder: "<label selector of the EPP's pods>",
		Reasons:     kubewatch.Reasons,
		Permissions: Permissions,
		Settings: func(b *discovery.Binder) discovery.Bound {
			var cfg Config
			b.String(&cfg.Selector, SelectorSetting, checkSelector)
			discovery.BindPortName(b, &cfg.PortName)
			discovery.BindPort(b, &cfg.Port)
			discovery.BindMembership(b, &cfg.Membership)
			return discovery.Bound{
				Complete: func(self *peers.Self) error {
					if cfg.Selector == "" {
						return fmt.Errorf("%s is required: the label selector of the EPP's own pods", b.Name(SelectorSetting))
					}
					if b.Namespace() == "" {
						return fmt.Errorf("%s needs a namespace: set %s or the NAMESPACE env (downward API fieldRef metadata.namespace)", b.Name(SelectorSetting), b.Name(discovery.NamespaceSetting))
					}
					if !self.Known() {
						return fmt.Errorf("%s: this replica must know itself to leave itself out of its peers: set POD_NAME (fieldRef metadata.name), POD_IP (status.podIP) or POD_IPS (status.podIPs) from the downward API", b.Name(SelectorSetting))
					}
					return nil
				},
				New: func(d discovery.Deps) (discovery.Source, error) {
					cfg.Namespace, cfg.Self = d.Namespace, d.Self
					return NewSource(cfg, d.Publisher, d.Log, Options{LoadConfig: d.RESTConfig}), nil
				},
			}
		},
	}
}

// checkSelector refuses what is not a label selector, and one that selects every
// pod of the namespace.
func checkSelector(s string) error {
	sel, err := labels.Parse(s)
	if err != nil {
		return err
	}
	if sel.Empty() {
		return errors.New("selects every pod of the namespace: select the EPP's own pods, e.g. app.kubernetes.io/name=epp")
	}
	return nil
}
