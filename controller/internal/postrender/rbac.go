package postrender

// rbac is the peer-discovery Role and RoleBinding for the pods' ServiceAccount.
func rbac(w *workload, svc string) []object {
	sa, _ := w.pod["serviceAccountName"].(string)
	if sa == "" {
		sa = "default"
	}
	name := svc + "-peer-discovery"
	meta := func() object {
		m := object{"name": name}
		if w.ns != "" {
			m["namespace"] = w.ns
		}
		if l := mapAt(w.doc, "metadata")["labels"]; l != nil {
			m["labels"] = l
		}
		return m
	}
	subject := object{"kind": "ServiceAccount", "name": sa}
	if w.ns != "" {
		subject["namespace"] = w.ns
	}
	return []object{
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(),
			"rules": []any{object{"apiGroups": []any{"discovery.k8s.io"}, "resources": []any{"endpointslices"}, "verbs": []any{"get", "list", "watch"}}}},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(),
			"roleRef":  object{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
			"subjects": []any{subject}},
	}
}
