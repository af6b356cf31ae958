package kustomize_test

import (
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, "kustomize tests", func(e *testenv.Env) { env = e }) }
