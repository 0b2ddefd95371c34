package config

import (
	"fmt"
	"strings"
	"testing"
)

// Each quota out of its range is named with its key, value and range.
func TestMailQuotasOutOfRange(t *testing.T) {
	var got []string
	add := func(path, format string, args ...any) { got = append(got, path+": "+fmt.Sprintf(format, args...)) }
	Mailbox{MaxUnread: 0, SenderPerMinute: -1, MaxMemoryPercent: 80}.checkQuotas(add)
	want := "mailbox.max_unread: 0 is out of range; must be between 1 and 10000000|" +
		"mailbox.sender_per_minute: -1 is out of range; must be between 0 and 1000000|" +
		"mailbox.max_memory_percent: 80 is out of range; must be between 81 and 100"
	if strings.Join(got, "|") != want {
		t.Errorf("problems = %q; want %q", got, want)
	}
	got = nil
	Mailbox{MaxUnread: 1, SenderPerMinute: 0, MaxMemoryPercent: 100}.checkQuotas(add)
	if len(got) != 0 {
		t.Errorf("problems at %v for the lowest valid values (sender quota off)", got)
	}
}
