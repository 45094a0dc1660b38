package kubeenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the key material of one Env, written as PEM files into a
// directory: a CA, the API server's serving certificate (127.0.0.1, ::1
// and localhost) and an admin client certificate, both signed by it (and
// client certificates for other users on demand), and the service-account
// signing key pair. Every key is ECDSA P-256: quick to make, and the API
// server accepts it everywhere.
type pki struct {
	caCert, servingCert, servingKey  string // file paths
	saPub, saKey                     string
	caPEM, adminCertPEM, adminKeyPEM []byte
	ca                               *x509.Certificate
	caKey                            *ecdsa.PrivateKey
}

// adminUser is the admin client certificate's user; its group
// system:masters passes every RBAC check.
const adminUser = "xlb-test-admin"

// validity is how long the certificates are valid, from an hour ago.
const validity = 10 * 24 * time.Hour

// newPKI makes the material and writes the files into dir.
func newPKI(dir string) (*pki, error) {
	p := &pki{
		caCert:      filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		saPub:       filepath.Join(dir, "sa.pub"),
		saKey:       filepath.Join(dir, "sa.key"),
	}
	now := time.Now().Add(-time.Hour)
	caKey, caDER, err := certificate(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "xlb-test-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	if err != nil {
		return nil, err
	}
	if p.ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	p.caKey, p.caPEM = caKey, pemBlock("CERTIFICATE", caDER)
	srvKey, srvDER, err := certificate(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:   now,
		NotAfter:    now.Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default"},
	}, p.ca, caKey)
	if err != nil {
		return nil, err
	}
	if p.adminCertPEM, p.adminKeyPEM, err = p.clientCert(adminUser, []string{"system:masters"}); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return p, p.write(srvKey, srvDER, saKey)
}

// clientCert makes a client certificate, signed by the CA, for user in
// groups (the API server takes the user from the common name and the
// groups from the organizations); it returns the certificate's and the
// key's PEM.
func (p *pki) clientCert(user string, groups []string) (cert, key []byte, err error) {
	now := time.Now().Add(-time.Hour)
	k, der, err := certificate(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		NotBefore:   now,
		NotAfter:    now.Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, p.ca, p.caKey)
	if err != nil {
		return nil, nil, err
	}
	if key, err = keyPEM(k); err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), key, nil
}

// write writes the files the API server reads.
func (p *pki) write(srvKey *ecdsa.PrivateKey, srvDER []byte, saKey *ecdsa.PrivateKey) error {
	srvKeyPEM, err := keyPEM(srvKey)
	if err != nil {
		return err
	}
	saKeyPEM, err := keyPEM(saKey)
	if err != nil {
		return err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	for path, b := range map[string][]byte{
		p.caCert:      p.caPEM,
		p.servingCert: pemBlock("CERTIFICATE", srvDER),
		p.servingKey:  srvKeyPEM,
		p.saKey:       saKeyPEM,
		p.saPub:       pemBlock("PUBLIC KEY", saPubDER),
	} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// certificate makes a key and a certificate of tmpl for it, signed by
// parent's key (self-signed when parent is nil); it returns the key and
// the certificate's DER.
func certificate(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate %s: %w", tmpl.Subject.CommonName, err)
	}
	return key, der, nil
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pemBlock("EC PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
