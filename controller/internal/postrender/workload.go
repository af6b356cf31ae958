package postrender

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/contract"
)

// workload is the Deployment or StatefulSet with the EPP container.
type workload struct {
	doc       object
	name, ns  string
	template  object
	pod       object
	container object
}

func findWorkload(docs []object, container string) (*workload, error) {
	var found []*workload
	for _, d := range docs {
		if k, _ := d["kind"].(string); k != "Deployment" && k != "StatefulSet" {
			continue
		}
		spec, _ := d["spec"].(object)
		tmpl, _ := spec["template"].(object)
		pod, _ := tmpl["spec"].(object)
		for _, c := range objects(pod["containers"]) {
			if c["name"] == container {
				m := mapAt(d, "metadata")
				name, _ := m["name"].(string)
				ns, _ := m["namespace"].(string)
				found = append(found, &workload{doc: d, name: name, ns: ns, template: tmpl, pod: pod, container: c})
			}
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, fmt.Errorf("no Deployment or StatefulSet with a container named %q: is this an EPP chart? (--container names another)", container)
	default:
		return nil, fmt.Errorf("%d workloads with a container named %q: peer discovery is added to one EPP at a time", len(found), container)
	}
}

// service is the peer Service.
type service struct {
	name string
	spec object
}

func findService(docs []object, w *workload, name string) (*service, error) {
	podLabels := labels.Set{}
	for k, v := range mapAt(mapAt(w.template, "metadata"), "labels") {
		podLabels[k], _ = v.(string)
	}
	var found []*service
	for _, d := range docs {
		if d["kind"] != "Service" {
			continue
		}
		m := mapAt(d, "metadata")
		n, _ := m["name"].(string)
		spec := mapAt(d, "spec")
		sel := labels.Set{}
		for k, v := range mapAt(spec, "selector") {
			sel[k], _ = v.(string)
		}
		if spec["clusterIP"] == "None" {
			continue
		}
		if name != "" && n == name || name == "" && len(sel) > 0 && labels.SelectorFromSet(sel).Matches(podLabels) {
			found = append(found, &service{name: n, spec: spec})
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case name != "":
		return nil, fmt.Errorf("--service=%s: no such Service in the manifests", name)
	case len(found) == 0:
		return nil, fmt.Errorf("no Service selects the pods of %s: peers are found from the EndpointSlices of the EPP's Service (--service names it)", w.name)
	}
	var names []string
	for _, s := range found {
		if s.name == w.name {
			return s, nil
		}
		names = append(names, s.name)
	}
	return nil, fmt.Errorf("the Services %s all select the EPP's pods: name the peer Service with --service", strings.Join(names, ", "))
}

// flagOf names the flag that sets the port named name, for messages.
func flagOf(name string) string {
	if name == contract.DebugPortName {
		return "--debug-port"
	}
	return "--port"
}

// tcp reports whether a port entry is TCP (the default protocol).
func tcp(p object) bool {
	proto, _ := p["protocol"].(string)
	return proto == "" || proto == "TCP"
}

// number is a port entry's number field as an int (YAML decodes it as float64).
func number(p object, field string) int {
	switch n := p[field].(type) {
	case float64:
		return int(n)
	case int:
		return n
	case int64:
		return int(n)
	}
	return 0
}

// checkPodPorts refuses a TCP port of any container of the pod (init containers,
// sidecars such as upstream's proxy, the EPP itself under another name) on a number
// that the plugin binds.
func checkPodPorts(w *workload, want map[string]int) error {
	for _, field := range []string{"initContainers", "containers"} {
		for _, ct := range objects(w.pod[field]) {
			for _, p := range objects(ct["ports"]) {
				for name, n := range want {
					if tcp(p) && number(p, "containerPort") == n && (ct["name"] != w.container["name"] || p["name"] != name) {
						return fmt.Errorf("%s=%d: container %v of %s already has port %d (%v): pick another %s",
							flagOf(name), n, ct["name"], w.name, n, p["name"], flagOf(name))
					}
				}
			}
		}
	}
	return nil
}

// checkServicePorts refuses a TCP port of the peer Service on a number the plugin's
// ports take, under another name.
func checkServicePorts(svc *service, want map[string]int) error {
	for _, p := range objects(svc.spec["ports"]) {
		for name, n := range want {
			if tcp(p) && number(p, "port") == n && p["name"] != name {
				return fmt.Errorf("%s=%d: Service %s already has port %d (%v): pick another %s",
					flagOf(name), n, svc.name, n, p["name"], flagOf(name))
			}
		}
	}
	return nil
}
