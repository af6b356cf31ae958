// Package wire is peersync's wire format: the frames one replica pushes to a peer
// over a connection (the hello, full and delta states), and the encodings of the
// values in them, chosen by the values' Go type and decoded into the receiver's own
// type for the key. It holds no state and does no I/O but reading one frame, so that
// it can be fuzzed on its own.
package wire
