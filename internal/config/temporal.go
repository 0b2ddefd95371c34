package config

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"

	"github.com/crewlet/crewlet"
)

// ClientTLS is the TLS configuration of the connection to Temporal; nil when
// temporal.tls is not enabled. An error names the key at fault.
func (t Temporal) ClientTLS() (*tls.Config, error) {
	c := t.TLS
	if !c.Enabled {
		if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" {
			return nil, crewlet.Errorf(crewlet.EINVALID, "temporal.tls: files or a server name are set but temporal.tls.enabled is false; enable it")
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(t.Address); err == nil {
			cfg.ServerName = host
		}
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, crewlet.Errorf(crewlet.EINVALID, "temporal.tls.ca_file: cannot read %s: %v", c.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, crewlet.Errorf(crewlet.EINVALID, "temporal.tls.ca_file: %s holds no PEM certificate", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case (c.CertFile == "") != (c.KeyFile == ""):
		return nil, crewlet.Errorf(crewlet.EINVALID, "temporal.tls: cert_file and key_file go together (mutual TLS); set both or neither")
	case c.CertFile != "":
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			// The key file's content never reaches the message.
			return nil, crewlet.Errorf(crewlet.EINVALID, "temporal.tls.cert_file/key_file: cannot load the pair %s, %s: %s",
				c.CertFile, c.KeyFile, strings.SplitN(err.Error(), ":", 2)[0])
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// APIKey is the key sent to Temporal with every call; empty when none is
// configured. An error names the variable, never its value.
func (t Temporal) APIKey() (string, error) {
	if t.APIKeyEnv == "" {
		return "", nil
	}
	if !envNameRE.MatchString(t.APIKeyEnv) {
		return "", crewlet.Errorf(crewlet.EINVALID, "temporal.api_key_env: invalid environment variable name %q; must match %s", t.APIKeyEnv, EnvNamePattern)
	}
	key := strings.TrimSpace(os.Getenv(t.APIKeyEnv))
	if key == "" {
		return "", crewlet.Errorf(crewlet.EINVALID, "temporal.api_key_env: environment variable %s is not set or empty; export the key in it", t.APIKeyEnv)
	}
	return key, nil
}

// checkTemporal reports the problems of the temporal section's security.
func checkTemporal(add addFunc, t Temporal) {
	for _, err := range []error{func() error { _, err := t.ClientTLS(); return err }(), func() error { _, err := t.APIKey(); return err }()} {
		if err != nil {
			msg := crewlet.ErrorMessage(err)
			key, rest, _ := strings.Cut(msg, ": ")
			add(key, "%s", rest)
		}
	}
}
