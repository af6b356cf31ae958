// Package e2e is the end-to-end suite (build tag e2e): it deploys the EPP through
// Helm, kustomize and Terraform with terratest, with peer discovery on and off, and
// checks every replica's own /debug/peers while the Deployment scales and loses a
// pod. Backends: "local" (localcluster + podproc, no Docker; `make e2e-local`) and
// "kind" (`make e2e-kind`).
package e2e
