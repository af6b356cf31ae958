package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestRewriteStripsSysResource(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"ociVersion":"1.0.2","process":{"args":["sh"],"capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE"],"effective":["CAP_SYS_RESOURCE"],"permitted":["CAP_SYS_RESOURCE","CAP_NET_ADMIN"]}},"root":{"path":"rootfs"}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	proc := filepath.Join(dir, "process.json")
	if err := os.WriteFile(proc, []byte(`{"args":["ls"],"capabilities":{"bounding":["CAP_SYS_RESOURCE","CAP_KILL"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rewrite([]string{"--root", "/run/x", "--log", "/tmp/l", "create", "--bundle", dir, "id1"}); err != nil {
		t.Fatal(err)
	}
	if err := rewrite([]string{"--root", "/run/x", "exec", "--process", proc, "--detach", "id1"}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Process struct {
			Capabilities map[string][]string `json:"capabilities"`
		} `json:"process"`
		Root map[string]any `json:"root"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for set, caps := range doc.Process.Capabilities {
		if slices.Contains(caps, "CAP_SYS_RESOURCE") {
			t.Fatalf("%s still has CAP_SYS_RESOURCE: %v", set, caps)
		}
	}
	if !slices.Equal(doc.Process.Capabilities["bounding"], []string{"CAP_CHOWN"}) || doc.Root["path"] != "rootfs" {
		t.Fatalf("other content changed: %s", b)
	}
	b, _ = os.ReadFile(proc)
	if string(b) != `{"args":["ls"],"capabilities":{"bounding":["CAP_KILL"]}}` {
		t.Fatalf("process file: %s", b)
	}
}

func TestOtherSubcommandsUntouched(t *testing.T) {
	if err := rewrite([]string{"--root", "/run/x", "state", "id1"}); err != nil {
		t.Fatal(err)
	}
	if err := rewrite([]string{"--version"}); err != nil {
		t.Fatal(err)
	}
}
