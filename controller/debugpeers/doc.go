// Package debugpeers serves one discovery's peer view as the /debug/peers document:
// one renderer for the bytes a client gets, the bytes the snapshot file holds and
// what tests read. The epp binary serves it on its metrics address; an EPP plugin
// may serve it on an address of its own.
package debugpeers
