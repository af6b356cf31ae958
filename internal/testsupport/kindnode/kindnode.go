// Package kindnode injects network faults into a node of the project's kind cluster
// from a test: iptables rules in the node's container (docker exec), removed when
// the test ends.
package kindnode

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// InsertRule inserts rule (a chain and a match, e.g. FORWARD -s 10.244.1.5/32 -p tcp
// --dport 9005 -j DROP) into node's iptables, or fails the test, and returns a
// function that deletes it again; the test's cleanup deletes it too if it is still
// there.
func InsertRule(t testing.TB, node string, rule ...string) (remove func() error) {
	t.Helper()
	if err := iptables(node, "-I", rule); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var err error
	remove = func() error {
		once.Do(func() { err = iptables(node, "-D", rule) })
		return err
	}
	t.Cleanup(func() { _ = remove() })
	return remove
}

func iptables(node, op string, rule []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", append([]string{"exec", node, "iptables", op}, rule...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker exec %s iptables %s %v: %w: %s", node, op, rule, err, out)
	}
	return nil
}
