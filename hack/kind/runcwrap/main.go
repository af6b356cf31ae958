// Command runcwrap is a runc wrapper for machines whose capability bounding set lacks
// CAP_SYS_RESOURCE: `docker run --privileged` (which kind always uses) asks for every
// capability, and runc then fails with "unable to apply caps: operation not
// permitted". runcwrap removes CAP_SYS_RESOURCE from the OCI bundle's config.json
// (runc create/run --bundle) and from the process file (runc exec --process), then
// runs the real runc with the same arguments.
//
// Register it with dockerd (--add-runtime epp-runc=<path> --default-runtime epp-runc)
// and, inside a kind node, as the containerd runtime's BinaryName.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

const dropped = "CAP_SYS_RESOURCE"

// realRunc lists where the real runc may be; $EPP_REAL_RUNC wins.
var realRunc = []string{"/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc.real", "/usr/local/bin/runc.real"}

func main() {
	args := os.Args[1:]
	if err := rewrite(args); err != nil {
		fmt.Fprintf(os.Stderr, "runcwrap: %v\n", err)
		os.Exit(1)
	}
	bin, err := findRunc()
	if err != nil {
		fmt.Fprintf(os.Stderr, "runcwrap: %v\n", err)
		os.Exit(1)
	}
	if err := syscall.Exec(bin, append([]string{bin}, args...), os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "runcwrap: exec %s: %v\n", bin, err)
		os.Exit(1)
	}
}

func findRunc() (string, error) {
	cands := realRunc
	if p := os.Getenv("EPP_REAL_RUNC"); p != "" {
		cands = []string{p}
	}
	self, _ := os.Executable()
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && !st.IsDir() && c != self {
			return c, nil
		}
	}
	return "", fmt.Errorf("no runc found in %v", cands)
}

// rewrite finds the subcommand and edits the files it will read.
func rewrite(args []string) error {
	sub, rest := subcommand(args)
	switch sub {
	case "create", "run":
		bundle := flagValue(rest, "--bundle", "-b")
		if bundle == "" {
			bundle = "."
		}
		return editFile(filepath.Join(bundle, "config.json"), func(doc map[string]any) {
			if p, ok := doc["process"].(map[string]any); ok {
				stripCaps(p)
			}
		})
	case "exec":
		if f := flagValue(rest, "--process", "-p"); f != "" {
			return editFile(f, stripCaps)
		}
	}
	return nil
}

// subcommand skips runc's global flags (all of which take a value, except booleans
// written as --flag or --flag=value) and returns the subcommand and what follows.
func subcommand(args []string) (string, []string) {
	valued := []string{"--root", "--log", "--log-format", "--criu", "--rootless"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return a, args[i+1:]
		}
		if slices.Contains(valued, a) {
			i++
		}
	}
	return "", nil
}

func flagValue(args []string, names ...string) string {
	for i, a := range args {
		for _, n := range names {
			if a == n && i+1 < len(args) {
				return args[i+1]
			}
			if strings.HasPrefix(a, n+"=") {
				return strings.TrimPrefix(a, n+"=")
			}
		}
	}
	return ""
}

func editFile(path string, edit func(map[string]any)) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	edit(doc)
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, st.Mode().Perm())
}

// stripCaps removes CAP_SYS_RESOURCE from every capability set of an OCI process.
func stripCaps(process map[string]any) {
	caps, ok := process["capabilities"].(map[string]any)
	if !ok {
		return
	}
	for set, v := range caps {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		kept := list[:0]
		for _, c := range list {
			if c != dropped {
				kept = append(kept, c)
			}
		}
		caps[set] = kept
	}
}
