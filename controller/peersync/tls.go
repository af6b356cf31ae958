package peersync

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
