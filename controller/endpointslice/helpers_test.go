package endpointslice_test

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
)

func testLogger(t *testing.T) logr.Logger { return testr.New(t) }
