package config

import "os/user"

// checkRunAs checks an MCP server's run_as: only a command runs as a user,
// and that user must exist here, every process of the company reading the
// same file on machines that know the same users.
func checkRunAs(add addFunc, at string, sc MCPServer) {
	switch {
	case sc.RunAs == "":
	case sc.URL != "":
		add(at, "applies only to a command; an HTTP server runs elsewhere")
	default:
		if _, err := user.Lookup(sc.RunAs); err == nil {
			return
		}
		if _, err := user.LookupId(sc.RunAs); err == nil {
			return
		}
		add(at, "unknown user %q; name a user of this machine (getent passwd), such as an unprivileged account made for MCP servers", sc.RunAs)
	}
}
