// Package terraform holds the tests of the Terraform module in this folder: fmt,
// validate, `terraform test` (plan-level, mocked providers), validation messages, and
// a real apply and destroy against a real kube-apiserver.
package terraform
