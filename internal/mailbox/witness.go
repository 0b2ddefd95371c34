package mailbox

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// StoreReport is one node's latest word, kept in Redis, on whether its
// presence write reached Postgres: the witness the liveness rules read
// when Postgres itself cannot be
// (docs/architecture.md, "Tenure: which node runs a seat").
type StoreReport struct {
	Incarnation string
	// Reached is whether that node's latest presence write succeeded.
	Reached bool
	// SentAgo is how long before this read the write it reports was sent,
	// by Redis's clock: the reporting node says how long ago it sent the
	// write, and the script stamps the report with Redis's time less that,
	// so every report is stamped and aged by the one clock and no two
	// nodes' clocks are compared.
	SentAgo time.Duration
}

// witnessKey is the hash of every node's latest report.
func (m *Mailbox) witnessKey() string { return m.prefix + ":nodes:store" }

// witnessScript records one node's report, stamped with when its write
// was sent (Redis's time less the sent-ago the node gives), and returns
// every other node's, with how long ago its write was sent; reports older
// than the forget span are dropped on the way (their nodes are gone). The
// stored form, "reached:seconds:microseconds", is the one builds before
// the sent-ago stamp wrote (they stamped the report's arrival, a little
// later than its write's send), so nodes of both builds read each other.
// KEYS: the witness hash. ARGV: incarnation, 1|0 (reached), forget span µs,
// sent-ago µs. Returns {other incarnation, reached, sent-ago µs, ...}.
var witnessScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local sent = now - tonumber(ARGV[4] or '0')
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. string.format('%d', math.floor(sent / 1000000)) .. ':' .. string.format('%d', sent % 1000000))
local forget = tonumber(ARGV[3])
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local reached, s, us = string.match(all[i + 1], '^(%d):(%d+):(%d+)$')
  local age = forget + 1
  if s then age = now - (tonumber(s) * 1000000 + tonumber(us)) end
  if age > forget then
    redis.call('HDEL', KEYS[1], all[i])
  elseif all[i] ~= ARGV[1] then
    table.insert(out, all[i])
    table.insert(out, reached)
    table.insert(out, string.format('%d', math.max(age, 0)))
  end
end
return out
`)

// ReportStore records whether this node's latest presence write, sent
// sentAgo before this call, reached Postgres, and returns every peer's
// latest report younger than forgetAfter.
func (m *Mailbox) ReportStore(ctx context.Context, incarnation string, reached bool, sentAgo, forgetAfter time.Duration) ([]StoreReport, error) {
	flag := "0"
	if reached {
		flag = "1"
	}
	res, err := witnessScript.Run(ctx, m.rdb, []string{m.witnessKey()}, incarnation, flag, forgetAfter.Microseconds(),
		max(sentAgo, 0).Microseconds()).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("report presence to the redis witness: %w", err)
	}
	reports := make([]StoreReport, 0, len(res)/3)
	for i := 0; i+2 < len(res); i += 3 {
		ago, err := strconv.ParseInt(res[i+2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read the redis witness: sent-ago %q of %s: %w", res[i+2], res[i], err)
		}
		reports = append(reports, StoreReport{Incarnation: res[i], Reached: res[i+1] == "1", SentAgo: time.Duration(ago) * time.Microsecond})
	}
	return reports, nil
}
