package peersync

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// TLSFiles are the PEM files of mutual TLS between peers, as a Kubernetes TLS
// Secret mounts them (ca.crt, tls.crt, tls.key): every replica presents its
// certificate and accepts only peers whose certificate the CA signed. The files are
// read again when they change (a rotated Secret), checked at most once a second.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
	// ServerName, if set, is the name a peer's certificate must hold; otherwise the
	// chain to the CA is what is checked (pods have no stable names to put in a
	// certificate; the CA is the trust boundary).
	ServerName string
	// RequireReplicaName binds a peer's certificate to the replica it claims to be:
	// its certificate must name that replica (see NamesReplica), both ways: the
	// listener checks the dialer's hello, the dialer the peer it dialed. Without it,
	// one Secret shared by every replica is enough, and any certificate the CA
	// signed may claim any peer (the source address is still checked against
	// discovery). Per-pod certificates (cert-manager's csi-driver, say) make it
	// possible.
	RequireReplicaName bool

	mu      sync.Mutex
	checked time.Time
	stamp   string
	cert    *tls.Certificate
	pool    *x509.CertPool
}

// TLSFilesInDir is TLSFiles for a directory holding a Secret's ca.crt, tls.crt and
// tls.key.
func TLSFilesInDir(dir string) *TLSFiles {
	return &TLSFiles{CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
}

// Check loads the files once, so that a replica with unreadable certificates fails
// at start-up with the file at fault.
func (t *TLSFiles) Check() error {
	_, _, err := t.load()
	return err
}

func (t *TLSFiles) load() (*tls.Certificate, *x509.CertPool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cert != nil && time.Since(t.checked) < time.Second {
		return t.cert, t.pool, nil
	}
	stamp := ""
	for _, f := range []string{t.CAFile, t.CertFile, t.KeyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, nil, fmt.Errorf("mTLS file: %w", err)
		}
		stamp += fmt.Sprintf("%s:%d:%d;", f, fi.Size(), fi.ModTime().UnixNano())
	}
	t.checked = time.Now()
	if t.cert != nil && stamp == t.stamp {
		return t.cert, t.pool, nil
	}
	ca, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("mTLS CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, nil, fmt.Errorf("mTLS CA file %s: no PEM certificate in it", t.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("mTLS certificate %s / key %s: %w", t.CertFile, t.KeyFile, err)
	}
	t.cert, t.pool, t.stamp = &cert, pool, stamp
	return t.cert, t.pool, nil
}

// verify checks a peer's chain against the CA (and ServerName, if set).
func (t *TLSFiles) verify(cs tls.ConnectionState, usage x509.ExtKeyUsage) error {
	_, pool, err := t.load()
	if err != nil {
		return err
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: t.ServerName,
		KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// NamesReplica reports whether the certificate names the replica namespace/name: a
// DNS name "<name>.<namespace>" or starting with "<name>.<namespace>." (as
// "${POD_NAME}.${POD_NAMESPACE}.pod" or ".svc.cluster.local"), or a URI whose path
// ends with "/ns/<namespace>/pod/<name>".
func NamesReplica(c *x509.Certificate, namespace, name string) bool {
	want := name + "." + namespace
	for _, d := range c.DNSNames {
		if d == want || strings.HasPrefix(d, want+".") {
			return true
		}
	}
	for _, u := range c.URIs {
		if strings.HasSuffix(u.Path, "/ns/"+namespace+"/pod/"+name) {
			return true
		}
	}
	return false
}

// namesReplica checks that the peer's certificate names the replica.
func (t *TLSFiles) namesReplica(cs tls.ConnectionState, namespace, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the peer presented no certificate")
	}
	c := cs.PeerCertificates[0]
	if NamesReplica(c, namespace, name) {
		return nil
	}
	return fmt.Errorf("its certificate (DNS names %v, URIs %v) does not name %s/%s (want DNS name %s.%s[.…] or a URI ending /ns/%s/pod/%s)",
		c.DNSNames, c.URIs, namespace, name, name, namespace, namespace, name)
}

func (t *TLSFiles) serverConfig() (*tls.Config, error) {
	if _, _, err := t.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAnyClientCert, // verified below, against the CA
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, _, err := t.load()
			return c, err
		},
		VerifyConnection: func(cs tls.ConnectionState) error { return t.verify(cs, x509.ExtKeyUsageClientAuth) },
	}, nil
}

func (t *TLSFiles) clientConfig() (*tls.Config, error) {
	if _, _, err := t.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, //nolint:gosec // the chain is verified in VerifyConnection, against the CA; pods have no names to check
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, _, err := t.load()
			return c, err
		},
		VerifyConnection: func(cs tls.ConnectionState) error { return t.verify(cs, x509.ExtKeyUsageServerAuth) },
	}, nil
}
