package postrender

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/contract"
)

// addPlugin adds the plugin to the configuration the EPP reads, and returns the
// configuration's hash.
func addPlugin(docs []object, w *workload, args []string) (string, error) {
	file, text, textAt := "", "", -1
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--config-file="):
			file = strings.TrimPrefix(a, "--config-file=")
		case a == "--config-file" && i+1 < len(args):
			file = args[i+1]
		case strings.HasPrefix(a, "--config-text="):
			text, textAt = strings.TrimPrefix(a, "--config-text="), i
		case a == "--config-text" && i+1 < len(args):
			text, textAt = args[i+1], i+1
		}
	}
	if textAt >= 0 {
		out, err := withPlugin("--config-text", text)
		if err != nil {
			return "", err
		}
		raw := w.container["args"].([]any)
		if strings.HasPrefix(raw[textAt].(string), "--config-text=") {
			raw[textAt] = "--config-text=" + out
		} else {
			raw[textAt] = out
		}
		return hash(out), nil
	}
	if file == "" {
		return "", errors.New("the EPP reads no configuration (--config-file or --config-text): the plugin cannot be added")
	}
	cm, key, err := configMapOf(docs, w, file)
	if err != nil {
		return "", err
	}
	data := mapAt(cm, "data")
	content, _ := data[key].(string)
	out, err := withPlugin(file, content)
	if err != nil {
		return "", err
	}
	data[key] = out
	return hash(out), nil
}

// configMapOf finds the ConfigMap and key the EPP container reads file from.
func configMapOf(docs []object, w *workload, file string) (object, string, error) {
	dir, key := path.Dir(file), path.Base(file)
	var volume string
	for _, m := range objects(w.container["volumeMounts"]) {
		if p, _ := m["mountPath"].(string); path.Clean(p) == dir {
			volume, _ = m["name"].(string)
		}
	}
	if volume == "" {
		return nil, "", fmt.Errorf("--config-file %s: no volume of the EPP container is mounted at %s", file, dir)
	}
	var cmName string
	for _, v := range objects(w.pod["volumes"]) {
		if v["name"] == volume {
			if cm, ok := v["configMap"].(object); ok {
				cmName, _ = cm["name"].(string)
			}
		}
	}
	if cmName == "" {
		return nil, "", fmt.Errorf("--config-file %s: volume %s is not a ConfigMap", file, volume)
	}
	for _, d := range docs {
		if d["kind"] == "ConfigMap" && mapAt(d, "metadata")["name"] == cmName {
			if _, ok := mapAt(d, "data")[key]; !ok {
				return nil, "", fmt.Errorf("--config-file %s: ConfigMap %s has no key %s", file, cmName, key)
			}
			return d, key, nil
		}
	}
	return nil, "", fmt.Errorf("--config-file %s: ConfigMap %s is not among the manifests", file, cmName)
}

// withPlugin returns the EPP configuration with the plugin and its pluginRef.
func withPlugin(where, content string) (string, error) {
	var cfg object
	if err := yaml.Unmarshal([]byte(content), &cfg); err != nil {
		return "", fmt.Errorf("%s: not an EPP configuration: %w", where, err)
	}
	if cfg == nil {
		cfg = object{}
	}
	plugins := objects(cfg["plugins"])
	has := false
	for _, p := range plugins {
		if p["name"] == PluginName {
			if p["type"] != "endpointslice-peer-discovery" {
				return "", fmt.Errorf("%s: a plugin named %s of type %v is there already", where, PluginName, p["type"])
			}
			has = true
		}
	}
	if !has {
		cfg["plugins"] = append(asAny(plugins), object{"name": PluginName, "type": "endpointslice-peer-discovery"})
	}
	dl := mapAt(cfg, "dataLayer")
	if pd, ok := dl["peerDiscovery"].(object); ok && pd["pluginRef"] != PluginName {
		return "", fmt.Errorf("%s: dataLayer.peerDiscovery.pluginRef is %v already", where, pd["pluginRef"])
	}
	dl["peerDiscovery"] = object{"pluginRef": PluginName}
	out, err := yaml.Marshal(cfg)
	return string(out), err
}

// setImage replaces the EPP container's image.
func setImage(c object, image string) error {
	if image != "" {
		c["image"] = image
		return nil
	}
	current, _ := c["image"].(string)
	if strings.Contains(current, upstreamImage) {
		return fmt.Errorf("the EPP container runs %s, llm-d-router's own image, which has no peer-discovery plugin: pass --image=<llm-d-router EPP with peer discovery> (make image-llmd builds epp-peer-discovery/llm-d-router-epp)", current)
	}
	return nil
}

// testImage is the image of the epp binary for the test hook: given, or beside the
// EPP's image of llm-d-router's EPP with the plugin (…/llm-d-router-epp:tag gives
// …/epp:tag), else "".
func testImage(given, epp string) string {
	if given != "" {
		return given
	}
	repo, tag, ok := strings.Cut(epp, ":")
	if !ok || strings.Contains(tag, "/") || path.Base(repo) != "llm-d-router-epp" {
		return ""
	}
	return path.Join(path.Dir(repo), "epp") + ":" + tag
}

// testHook is the `helm test` Pod: epp check-peers from inside the cluster, with the
// pods' ServiceAccount (whose Role reads the EndpointSlices) and the replicas'
// membership; its labels are not the Service's selector (never an endpoint, never a
// peer). It runs under the restricted pod security level.
func testHook(w *workload, svc, membership, image string) object {
	sa, _ := w.pod["serviceAccountName"].(string)
	if sa == "" {
		sa = "default"
	}
	name := w.name + "-test-peers"
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	meta := object{"name": name, "labels": object{"app.kubernetes.io/component": "test", "app.kubernetes.io/part-of": w.name},
		"annotations": object{"helm.sh/hook": "test", "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"}}
	if w.ns != "" {
		meta["namespace"] = w.ns
	}
	args := []any{"check-peers", "--service=" + svc, "--port-name=" + contract.DebugPortName, "--membership=" + membership, "--timeout=60s"}
	if w.ns != "" {
		args = append(args[:2], append([]any{"--namespace=" + w.ns}, args[2:]...)...)
	} else {
		args = append(args, "--namespace=$(NAMESPACE)")
	}
	return object{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": object{
		"restartPolicy": "Never", "serviceAccountName": sa, "automountServiceAccountToken": true,
		"securityContext": object{"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": object{"type": "RuntimeDefault"}},
		"containers": []any{object{"name": "check-peers", "image": image, "imagePullPolicy": "IfNotPresent", "args": args,
			"env":             []any{fieldEnv(discovery.NamespaceSetting.Env[0], "metadata.namespace")},
			"securityContext": object{"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "runAsNonRoot": true, "capabilities": object{"drop": []any{"ALL"}}},
			"resources":       object{"requests": object{"cpu": "10m", "memory": "32Mi"}, "limits": object{"memory": "64Mi"}}}},
	}}
}
