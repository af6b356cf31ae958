package postrender

import rbacv1 "k8s.io/api/rbac/v1"

// rbac is the peer-discovery Role (rules) and RoleBinding for the pods'
// ServiceAccount.
func rbac(w *workload, svc string, rules []rbacv1.PolicyRule) []object {
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
			"rules": asAny(toObjects(rules))},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(),
			"roleRef":  object{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
			"subjects": []any{subject}},
	}
}
