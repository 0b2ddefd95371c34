package config

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"unicode"

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

// DeploymentName is the worker deployment the nodes poll as:
// temporal.deployment.name, or the task queue's name with the characters
// Temporal reserves in deployment names ("." and ":") made "-", so two
// companies on one namespace are two deployments.
func (t Temporal) DeploymentName() string {
	if t.Deployment.Name != "" {
		return t.Deployment.Name
	}
	return strings.NewReplacer(".", "-", ":", "-").Replace(t.TaskQueue)
}

// maxDeploymentField bounds a deployment name or build id: Temporal builds
// workflow ids of both and refuses a field past about 480 bytes.
const maxDeploymentField = 255

// checkDeployment reports the problems of temporal.deployment.
func checkDeployment(add addFunc, t Temporal) {
	d := t.Deployment
	if name := t.DeploymentName(); d.Name != "" || t.TaskQueue != "" {
		switch {
		case strings.ContainsAny(name, ".:"):
			add("temporal.deployment.name", "%q contains \".\" or \":\", which Temporal reserves; use \"-\" instead", name)
		case strings.HasPrefix(name, "__"):
			add("temporal.deployment.name", "%q starts with \"__\", which Temporal reserves; set a name that does not", name)
		case len(name) > maxDeploymentField:
			add("temporal.deployment.name", "%q is %d bytes, more than %d; set a shorter name", name, len(name), maxDeploymentField)
		}
	}
	switch b := d.BuildID; {
	case strings.HasPrefix(b, "__"):
		add("temporal.deployment.build_id", "%q starts with \"__\", which Temporal reserves; set another, or leave it empty for the binary's revision", b)
	case len(b) > maxDeploymentField:
		add("temporal.deployment.build_id", "%q is %d bytes, more than %d; set a shorter id, or leave it empty for the binary's revision", b, len(b), maxDeploymentField)
	case strings.IndexFunc(b, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		add("temporal.deployment.build_id", "%q holds a space or a control character; use letters, digits, \"-\" and \".\"", b)
	}
	switch d.Promote {
	case PromoteFirst, PromoteAlways, PromoteNever:
	default:
		add("temporal.deployment.promote", "unknown value %q; must be one of: %s (a build becomes current when the deployment has none or no node of the current build runs), %s (every starting node makes its build current), %s (an operator promotes)",
			d.Promote, PromoteFirst, PromoteAlways, PromoteNever)
	}
}

// checkTemporal reports the problems of the temporal section's security
// and deployment.
func checkTemporal(add addFunc, t Temporal) {
	checkDeployment(add, t)
	for _, err := range []error{func() error { _, err := t.ClientTLS(); return err }(), func() error { _, err := t.APIKey(); return err }()} {
		if err != nil {
			msg := crewlet.ErrorMessage(err)
			key, rest, _ := strings.Cut(msg, ": ")
			add(key, "%s", rest)
		}
	}
}
