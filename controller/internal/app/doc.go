// Package app is the epp binary: its flags and their validation (options.go), and
// the wiring that runs a peer source and serves /metrics, /debug/peers, /healthz and
// /readyz (app.go). The integration tests run exactly this wiring.
package app
