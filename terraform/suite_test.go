package terraform_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/testsupport/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "terraform tests need a real API server: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}
