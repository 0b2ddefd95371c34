package api

import (
	"regexp"
	"strings"
	"testing"
)

// providerToolName is what OpenAI and Anthropic take as a tool's name.
var providerToolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Every seat and role gets a tool name the providers take, and no two
// tools share one: a handle too long for its prefix, and a seat whose
// handle would read as a role's tool, are told apart by a hash of the name.
func TestMCPToolNamesFitTheProvidersAndDoNotCollide(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 63)
	for _, c := range []struct {
		prefix, name, want string
	}{
		{askPrefix, "cto", "ask_cto"},
		{askPrefix, "eng-1", "ask_eng-1"},
		{askRolePrefix, "engineer", "ask_role_engineer"},
		{askPrefix, "role_engineer", "ask_role_engineer_"},
		{askPrefix, long, "ask_" + long[:51] + "_"},
		{askRolePrefix, long, "ask_role_" + long[:46] + "_"},
	} {
		got := toolName(c.prefix, c.name)
		if !providerToolName.MatchString(got) || !strings.HasPrefix(got, c.want) || strings.HasSuffix(c.want, "_") != (len(got) == len(c.want)+8) {
			t.Errorf("toolName(%q, %q) = %q; want %q (a hash's 8 hex digits after a trailing _)", c.prefix, c.name, got, c.want)
		}
	}
	seen := map[string]string{}
	for _, c := range [][2]string{{askPrefix, "role_x"}, {askRolePrefix, "x"}, {askPrefix, long}, {askPrefix, long[:62] + "b"}, {askRolePrefix, long}} {
		name := toolName(c[0], c[1])
		if other, dup := seen[name]; dup {
			t.Errorf("%s%s and %s share the tool name %s", c[0], c[1], other, name)
		}
		seen[name] = c[0] + c[1]
	}
}
