package peersync

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// writeTLSDir writes a Secret-like directory (ca.crt, tls.crt, tls.key) with a
// certificate for peer sync signed by a new CA, or by ca if given, with the DNS
// names dnsNames (default: the Service's).
func writeTLSDir(t *testing.T, ca *testCA, dnsNames ...string) (string, *testCA) {
	t.Helper()
	if ca == nil {
		ca = newTestCA(t)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "epp-peer-sync"},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"epp-peers.ns.svc"},
	}
	if len(dnsNames) > 0 {
		tmpl.DNSNames = dnsNames
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.crt", "CERTIFICATE", ca.cert.Raw)
	write("tls.crt", "CERTIFICATE", der)
	write("tls.key", "EC PRIVATE KEY", kb)
	return dir, ca
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

func TestMutualTLS(t *testing.T) {
	dirA, ca := writeTLSDir(t, nil)
	dirB, _ := writeTLSDir(t, ca)
	dirs := []string{dirA, dirB}
	n := 0
	rs := newCluster(t, 2, func(o *Options) { o.TLS = TLSFilesInDir(dirs[n]); n++ })
	for i, r := range rs {
		if err := r.s.Set("k", "ns/e", &load{Requests: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	waitSum(t, 3*time.Second, rs, "k", "ns/e", 3)

	// A replica with a certificate of another CA is refused, and its value never counts.
	dirX, _ := writeTLSDir(t, nil)
	x := startReplica(t, "x", func(o *Options) { o.TLS = TLSFilesInDir(dirX) })
	x.members.UpsertPeer(rs[0].meta())
	rs[0].members.UpsertPeer(x.meta())
	if err := x.s.Set("k", "ns/e", &load{Requests: 100}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 3*time.Second, func() string {
		if testutil.ToFloat64(rejections.WithLabelValues(rs[0].instance, RejectTLS)) > 0 {
			return ""
		}
		return "the other CA's certificate was not refused"
	})
	time.Sleep(5 * testInterval)
	if got := rs[0].requests("k", "ns/e"); got != 3 {
		t.Fatalf("replica 0 sums %d, want 3 (the other CA's replica must not count)", got)
	}

	// Files that cannot be read are a start-up error naming the file.
	if err := TLSFilesInDir(t.TempDir()).Check(); err == nil {
		t.Fatal("a directory without certificates passed Check")
	}
}

// TestCertificateMustNameTheReplica: with RequireReplicaName, a certificate of the
// CA is not enough: it must name the replica its hello claims (and the dialer checks
// the listener's names the peer it dialed). Without it, epp-2 presenting epp-1's
// certificate would be admitted.
func TestCertificateMustNameTheReplica(t *testing.T) {
	ca := newTestCA(t)
	dirs := map[string]string{}
	for _, name := range []string{"epp-0", "epp-1"} {
		dirs[name], _ = writeTLSDir(t, ca, name+".ns.pod")
	}
	named := func(name string) clusterOption {
		return func(o *Options) {
			o.TLS = TLSFilesInDir(dirs[name])
			o.TLS.RequireReplicaName = true
		}
	}
	r0 := startReplica(t, "epp-0", named("epp-0"))
	r1 := startReplica(t, "epp-1", named("epp-1"))
	rs := []*replica{r0, r1}
	r0.members.UpsertPeer(r1.meta())
	r1.members.UpsertPeer(r0.meta())
	for i, r := range rs {
		if err := r.s.Set("k", "ns/e", &load{Requests: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	waitSum(t, 3*time.Second, rs, "k", "ns/e", 3)

	// epp-2, listed by replica 0, presents epp-1's certificate (of the same CA).
	liar := startReplica(t, "epp-2", named("epp-1"))
	liar.members.UpsertPeer(r0.meta())
	r0.members.UpsertPeer(liar.meta())
	if err := liar.s.Set("k", "ns/e", &load{Requests: 100}); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(rejections.WithLabelValues(r0.instance, RejectIdentity))
	wait.For(t, 3*time.Second, func() string {
		if testutil.ToFloat64(rejections.WithLabelValues(r0.instance, RejectIdentity)) > before {
			return ""
		}
		return "a certificate naming epp-1 was accepted for epp-2"
	})
	if got := r0.requests("k", "ns/e"); got != 3 {
		t.Fatalf("replica 0 sums %d, want 3 (epp-2 must not count)", got)
	}
	// And epp-2 cannot dial replica 0 as what it is not, nor replica 0 accept it the
	// other way: replica 0's pushes to epp-2 fail the name check.
	wait.For(t, 3*time.Second, func() string {
		if testutil.ToFloat64(connectErrors.WithLabelValues(r0.instance, "tls")) > 0 {
			return ""
		}
		return "replica 0 pushed to a listener whose certificate names another replica"
	})
}
