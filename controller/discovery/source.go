package discovery

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Source finds peers and publishes every complete peer set, without the replica
// itself, through the Publisher it was built with.
type Source interface {
	// Run runs the source until ctx ends, then returns nil; an error means the
	// source cannot go on.
	Run(ctx context.Context) error
}

// ManagerSource is a Source driven by a controller-runtime manager: SetupWithManager
// registers it before the manager starts, and the manager's start makes it work; its
// Run only watches over it until ctx ends.
type ManagerSource interface {
	Source
	SetupWithManager(mgr manager.Manager) error
}

// Status is what a source reports besides its peers.
type Status interface {
	// Synced reports whether the first complete peer set was published.
	Synced() bool
	// SyncedAt is when that happened (zero before).
	SyncedAt() time.Time
	// LastError is the last error the source met, nil after a successful publish.
	LastError() error
}
