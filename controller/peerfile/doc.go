// Package peerfile is the peer source for environments without Kubernetes: a YAML
// or JSON file listing the peers, reloaded whenever it changes.
//
// The format is {"peers": [{"name", "namespace", "address", "port"}]}; the
// /debug/peers document (and so a snapshot file written by another epp) is accepted
// as well, and its entries' ready, serving and terminating conditions are kept (an
// entry without them is ready); the replica's membership then decides which entries
// are peers, as it does for endpoints. A file is taken whole or not at all: a file that fails to parse or
// validate leaves the last good set in place, is logged with the file, entry and
// field at fault, and is counted in epp_peer_discovery_errors_total.
//
// Source.Run notices writes, creates, atomic renames and the symlink swap of a
// Kubernetes ConfigMap volume (the "..data" link) through fsnotify on the file's
// folder, and re-reads the file every PollInterval (2 s by default) as well, so that
// no change is missed even when events are lost or the folder itself is replaced.
package peerfile
