package mailbox_test

import (
	"testing"

	"github.com/crewlet/crewlet/internal/mailbox"
)

// Events give way to mail: past the share of maxmemory the emitter drops
// them; with no maxmemory Redis is never full to it.
func TestNearlyFullReadsRedisMemory(t *testing.T) {
	info := func(used, max string) string {
		return "# Memory\r\nused_memory:" + used + "\r\nused_memory_human:1M\r\nmaxmemory:" + max + "\r\nmaxmemory_human:0B\r\n"
	}
	for _, tc := range []struct {
		used, max string
		full      bool
	}{
		{"1000", "0", false},
		{"700", "1000", false},
		{"801", "1000", true},
		{"268435456", "268435456", true},
	} {
		if got := mailbox.NearlyFull(info(tc.used, tc.max), 0.8); got != tc.full {
			t.Errorf("used %s of maxmemory %s: nearly full %v; want %v", tc.used, tc.max, got, tc.full)
		}
	}
}
