package config

// Bounds of the mailbox quotas (docs/operations.md, "Redis durability").
const (
	minMaxUnread = 1
	maxMaxUnread = 10_000_000
	// 0 turns the sender quota off, as api.mutations_per_minute's does.
	minSenderPerMinute = 0
	maxSenderPerMinute = 1_000_000
	// New mail must stop after the live events do (they give way at 80 %),
	// so the line sits above it; at 100 it stops only at maxmemory itself.
	minMaxMemoryPercent = 81
	maxMaxMemoryPercent = 100
)

// checkQuotas adds the problems of the mailbox quotas.
func (m Mailbox) checkQuotas(add addFunc) {
	for _, n := range []struct {
		path   string
		val    int
		lo, hi int
	}{
		{"mailbox.max_unread", m.MaxUnread, minMaxUnread, maxMaxUnread},
		{"mailbox.sender_per_minute", m.SenderPerMinute, minSenderPerMinute, maxSenderPerMinute},
		{"mailbox.max_memory_percent", m.MaxMemoryPercent, minMaxMemoryPercent, maxMaxMemoryPercent},
	} {
		if n.val < n.lo || n.val > n.hi {
			add(n.path, "%d is out of range; must be between %d and %d", n.val, n.lo, n.hi)
		}
	}
}
