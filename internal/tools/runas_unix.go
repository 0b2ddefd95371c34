//go:build unix

package tools

import (
	"fmt"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"

	"github.com/crewlet/crewlet"
)

// account is the user a stdio child runs as, resolved from its run_as.
type account struct {
	name string
	home string
	cred *syscall.Credential
}

// lookupAccount resolves a user name (or numeric uid) to its uid, primary
// group and supplementary groups.
func lookupAccount(name string) (account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return account{}, crewlet.Errorf(crewlet.EINVALID, "run_as %q: no such user on this machine", name)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return account{}, crewlet.Errorf(crewlet.EINVALID, "run_as %q: uid %q is not numeric", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return account{}, crewlet.Errorf(crewlet.EINVALID, "run_as %q: gid %q is not numeric", name, u.Gid)
	}
	// Without the user's own supplementary groups the child would keep
	// crewlet's: os/exec sets none unless told.
	groupIDs, err := u.GroupIds()
	if err != nil {
		return account{}, fmt.Errorf("run_as %q: list its groups: %w", name, err)
	}
	groups := make([]uint32, 0, len(groupIDs))
	for _, g := range groupIDs {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			groups = append(groups, uint32(n))
		}
	}
	return account{
		name: u.Username, home: u.HomeDir,
		cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups},
	}, nil
}

// setAccount makes cmd run as a; setProcGroup has set SysProcAttr.
func setAccount(cmd *exec.Cmd, a account) {
	cmd.SysProcAttr.Credential = a.cred
}

// ids are the account's uid and primary gid.
func (a account) ids() (int, int) { return int(a.cred.Uid), int(a.cred.Gid) }
