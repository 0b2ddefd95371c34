package api

import (
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"
)

// The door remembers at most maxSources sources: a flood from many
// addresses forgets the one seen longest ago, and a source seen again
// stays remembered with its failures.
func TestDoorRemembersBoundedSources(t *testing.T) {
	t.Parallel()
	var table sourceTable
	blocked := netip.MustParseAddr("10.0.0.1")
	for range 3 {
		table.failed(blocked, 3)
	}
	if !table.blocked(blocked, 3) {
		t.Fatal("a source past its 3 failed authentications is not blocked")
	}
	base := netip.MustParseAddr("fd00::").As16()
	for i := range 2 * maxSources {
		a := base
		a[14], a[15] = byte(i>>8), byte(i)
		table.failed(netip.AddrFrom16(a), 3)
		if i%1000 == 0 {
			// Seen now and then, it stays.
			table.failed(blocked, 3)
		}
	}
	if n := table.order.Len(); n != maxSources || len(table.index) != maxSources {
		t.Fatalf("the table holds %d sources (%d indexed); want %d", n, len(table.index), maxSources)
	}
	if !table.blocked(blocked, 3) {
		t.Fatal("a source seen lately was forgotten")
	}
	first := netip.AddrFrom16(base)
	if _, ok := table.index[first]; ok {
		t.Fatal("the source seen longest ago is still remembered")
	}
}

// Each field a request's bytes reach is clipped to 256 bytes, on a rune
// boundary.
func TestClipField(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"short", strings.Repeat("x", 1<<20), "é" + strings.Repeat("x", 300), strings.Repeat("é", 200)} {
		out := clipField(in)
		if len(out) > maxAuditField || !utf8.ValidString(out) || len(in) <= maxAuditField && out != in {
			t.Errorf("clipField of %d bytes: %d bytes, valid UTF-8 %v", len(in), len(out), utf8.ValidString(out))
		}
	}
}
