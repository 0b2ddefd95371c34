package mailbox

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// MemoryCheckEvery is how often a Memory asks Redis how full it is: often
// enough that a publish cannot run far past the line, rare enough that the
// check costs nothing next to the traffic.
const MemoryCheckEvery = time.Second

// Memory is the one watch on Redis's memory that writers consult before
// they add to it: the live-event emitter gives way first (its share is the
// lower), then new mail (mailbox.max_memory_percent), so work already
// accepted still finds room. It asks Redis (INFO memory) at most every
// MemoryCheckEvery and is safe for concurrent use.
type Memory struct {
	rdb *redis.Client

	mu        sync.Mutex
	checkedAt time.Time
	used, max float64
}

// NewMemory watches rdb's memory.
func NewMemory(rdb *redis.Client) *Memory { return &Memory{rdb: rdb} }

// Above reports whether Redis was using more than share of its maxmemory
// when last asked. A Redis with no maxmemory, or one that does not answer,
// is not above it: the write itself finds out.
func (m *Memory) Above(ctx context.Context, share float64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if time.Since(m.checkedAt) >= MemoryCheckEvery {
		m.checkedAt = time.Now()
		m.used, m.max = 0, 0
		if info, err := m.rdb.Info(ctx, "memory").Result(); err == nil {
			m.used, m.max = readMemory(info)
		}
	}
	return m.max > 0 && m.used > share*m.max
}

// NearlyFull reads Redis's INFO memory answer: whether used_memory is past
// share of maxmemory (false when maxmemory is 0, no limit).
func NearlyFull(info string, share float64) bool {
	used, max := readMemory(info)
	return max > 0 && used > share*max
}

func readMemory(info string) (used, max float64) {
	for _, line := range strings.Split(info, "\n") {
		key, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch key {
		case "used_memory":
			used, _ = strconv.ParseFloat(value, 64)
		case "maxmemory":
			max, _ = strconv.ParseFloat(value, 64)
		}
	}
	return used, max
}
