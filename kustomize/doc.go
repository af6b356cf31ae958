// Package kustomize holds the tests of the kustomize base, the peer-discovery
// component and the overlays: builds with krusty (kustomize's Go API), parity with
// the Helm chart, and acceptance by a real kube-apiserver.
package kustomize
