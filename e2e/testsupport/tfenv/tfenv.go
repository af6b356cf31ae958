// Package tfenv runs the project's Terraform module in tests: it finds the terraform
// (or OpenTofu) binary and the provider mirror that `make terraform-providers`
// builds, and copies the module with the chart it deploys to a temporary folder.
package tfenv

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gruntwork-io/terratest/modules/terraform"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// Binary is $TERRAFORM, else terraform on PATH, else bin/tofu.
func Binary() (string, error) {
	if b := os.Getenv("TERRAFORM"); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath("terraform"); err == nil {
		return b, nil
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	if b := filepath.Join(root, "bin", "tofu"); isExecutable(b) {
		return b, nil
	}
	return "", fmt.Errorf("no terraform binary: install terraform, or run `make tofu` to build OpenTofu into bin/tofu from the Go module proxy")
}

// CLIConfig is the CLI configuration that points Terraform at the provider mirror.
func CLIConfig() (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	rc := filepath.Join(root, "bin", "terraform.rc")
	if _, err := os.Stat(rc); err != nil {
		return "", fmt.Errorf("%s not found: run `make terraform-providers` to build the helm and kubernetes providers from the Go module proxy", rc)
	}
	return rc, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode()&0o111 != 0
}

// Env is the environment every Terraform command of the tests gets: the mirror, and
// no calls home (checkpoint) or prompts.
func Env(t testing.TB) map[string]string {
	t.Helper()
	rc, err := CLIConfig()
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"TF_CLI_CONFIG_FILE": rc,
		"CHECKPOINT_DISABLE": "1",
		"TF_IN_AUTOMATION":   "1",
	}
}

// CopyModule copies terraform/ and charts/epp into a temporary folder (keeping their
// relative layout, which the module's default chart path relies on) and returns it.
func CopyModule(t testing.TB) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	for _, sub := range []string{"terraform", filepath.Join("charts", "epp")} {
		if err := copyTree(filepath.Join(root, sub), filepath.Join(dst, sub)); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			if d.Name() == ".terraform" {
				return filepath.SkipDir
			}
			return os.MkdirAll(target, 0o755)
		}
		if filepath.Ext(path) == ".go" || d.Name() == ".terraform.lock.hcl" || filepath.Ext(path) == ".tfstate" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// Options are terratest options for dir with vars, using Binary and Env.
func Options(t testing.TB, dir string, vars map[string]any) *terraform.Options {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	return &terraform.Options{
		TerraformDir:    dir,
		TerraformBinary: bin,
		Vars:            vars,
		EnvVars:         Env(t),
		NoColor:         true,
	}
}
