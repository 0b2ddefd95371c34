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
	// RunAgo is, for a report that reached Postgres, how long before this
	// read the first write of the node's unbroken run of such reports was
	// sent (a report that did not reach it, or a gap longer than the
	// reporter's gap, begins a new run); RunKnown is false when the
	// witness holds no run for it (a node of a build before runs were
	// kept).
	RunAgo   time.Duration
	RunKnown bool
}

// witnessKey is the hash of every node's latest report, and
// witnessRunKey the hash of when each node's current run of reports that
// reached Postgres began.
func (m *Mailbox) witnessKey() string    { return m.prefix + ":nodes:store" }
func (m *Mailbox) witnessRunKey() string { return m.prefix + ":nodes:store:run" }

// witnessScript records one node's report, stamped with when its write
// was sent (Redis's time less the sent-ago the node gives), keeps when the
// node's current run of reports that reached Postgres began, and returns
// every other node's report, with how long ago its write was sent and its
// run began; reports older than the forget span are dropped on the way
// (their nodes are gone). The report's stored form,
// "reached:seconds:microseconds", is the one builds before the sent-ago
// stamp wrote (they stamped the report's arrival, a little later than its
// write's send), and runs are kept in a hash of their own, so nodes of
// both builds read each other.
// KEYS: the report hash, the run hash. ARGV: incarnation, 1|0 (reached),
// forget span µs, sent-ago µs, the longest gap within a run µs.
// Returns {other incarnation, reached, sent-ago µs, run-ago µs or -1, ...}.
var witnessScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local sent = now - tonumber(ARGV[4])
local function stamp(v)
  if not v then return nil end
  local r, s, us = string.match(v, '^(%d):(%d+):(%d+)$')
  if not s then return nil end
  return r, tonumber(s) * 1000000 + tonumber(us)
end
local prevReached, prevSent = stamp(redis.call('HGET', KEYS[1], ARGV[1]))
if ARGV[2] == '1' then
  local run = redis.call('HGET', KEYS[2], ARGV[1])
  if not (run and prevReached == '1' and sent - prevSent <= tonumber(ARGV[5])) then
    redis.call('HSET', KEYS[2], ARGV[1], string.format('%d', sent))
  end
else
  redis.call('HDEL', KEYS[2], ARGV[1])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. string.format('%d', math.floor(sent / 1000000)) .. ':' .. string.format('%d', sent % 1000000))
local forget = tonumber(ARGV[3])
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local reached, at = stamp(all[i + 1])
  local age = forget + 1
  if at then age = now - at end
  if age > forget then
    redis.call('HDEL', KEYS[1], all[i])
    redis.call('HDEL', KEYS[2], all[i])
  elseif all[i] ~= ARGV[1] then
    local runAgo = -1
    local run = redis.call('HGET', KEYS[2], all[i])
    if reached == '1' and run then runAgo = math.max(now - tonumber(run), 0) end
    table.insert(out, all[i])
    table.insert(out, reached)
    table.insert(out, string.format('%d', math.max(age, 0)))
    table.insert(out, string.format('%d', runAgo))
  end
end
return out
`)

// ReportStore records whether this node's latest presence write, sent
// sentAgo before this call, reached Postgres, and returns every peer's
// latest report younger than forgetAfter. Two reports that reached
// Postgres more than runGap apart are two runs.
func (m *Mailbox) ReportStore(ctx context.Context, incarnation string, reached bool, sentAgo, runGap, forgetAfter time.Duration) ([]StoreReport, error) {
	flag := "0"
	if reached {
		flag = "1"
	}
	res, err := witnessScript.Run(ctx, m.rdb, []string{m.witnessKey(), m.witnessRunKey()}, incarnation, flag,
		forgetAfter.Microseconds(), max(sentAgo, 0).Microseconds(), runGap.Microseconds()).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("report presence to the redis witness: %w", err)
	}
	reports := make([]StoreReport, 0, len(res)/4)
	for i := 0; i+3 < len(res); i += 4 {
		ago, err := strconv.ParseInt(res[i+2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read the redis witness: sent-ago %q of %s: %w", res[i+2], res[i], err)
		}
		run, err := strconv.ParseInt(res[i+3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read the redis witness: run-ago %q of %s: %w", res[i+3], res[i], err)
		}
		reports = append(reports, StoreReport{Incarnation: res[i], Reached: res[i+1] == "1",
			SentAgo: time.Duration(ago) * time.Microsecond, RunAgo: time.Duration(max(run, 0)) * time.Microsecond, RunKnown: run >= 0})
	}
	return reports, nil
}
