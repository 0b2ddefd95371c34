package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/replay"
)

// replayBenchTurns is how many three-round turns BenchmarkReplayThreeRoundTurn
// records and replays.
const replayBenchTurns = 20

// BenchmarkReplayThreeRoundTurn measures a replay of a recorded three-round
// turn (write, read the counter, answer; scripted provider, nothing
// changed), from POST /turns/{handle}/{work_key}/replay sent to its report
// back, beside the recorded turn's own duration (its row's started_at to
// finished_at), over replayBenchTurns turns of one seat on one node. Run
// it with
//
//	go test ./internal/e2e -run '^$' -bench ReplayThreeRoundTurn -benchtime 1x
func BenchmarkReplayThreeRoundTurn(b *testing.B) {
	c, _, _ := newReplayCompany(b)
	defer c.stopAll()
	var turns, replays []time.Duration
	for i := range replayBenchTurns {
		want := fmt.Sprintf("recorded: written: invoice %d, count %d", i, i+1)
		reply, turn := c.recordedTurn(fmt.Sprintf("record invoice %d", i))
		if reply != want {
			b.Fatalf("reply %q; want %q", reply, want)
		}
		turns = append(turns, turn.FinishedAt.Sub(turn.StartedAt))
		start := time.Now()
		r := c.replay(turn, replay.Change{})
		replays = append(replays, time.Since(start))
		if !r.Threads[0].Same || r.Matched != 2 {
			b.Fatalf("replay of %s: same %v, %d matched; want the recorded answer from 2 matched calls", turn.TurnID, r.Threads[0].Same, r.Matched)
		}
	}
	reportP50Max(b, "replay-", fmt.Sprintf("%d replays of a 3-round turn, request to report", len(replays)), replays)
	reportP50Max(b, "turn-", fmt.Sprintf("%d recorded 3-round turns, started to finished", len(turns)), turns)
}
