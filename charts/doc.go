// Package charts holds the tests of the Helm chart in charts/epp: in-process
// rendering with the Helm SDK, the values schema, helm lint, and acceptance of every
// rendering (and the RBAC it grants) by a real kube-apiserver.
package charts
