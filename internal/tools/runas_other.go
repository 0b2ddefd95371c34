//go:build !unix

package tools

import (
	"os/exec"

	"github.com/crewlet/crewlet"
)

type account struct {
	name string
	home string
}

func lookupAccount(name string) (account, error) {
	return account{}, crewlet.Errorf(crewlet.EINVALID, "run_as %q: running an MCP server as another user needs a unix system", name)
}

func setAccount(*exec.Cmd, account) {}

// ids are unknown here: no account is ever resolved.
func (a account) ids() (int, int) { return -1, -1 }
