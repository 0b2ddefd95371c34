package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/schedules"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

const benchSchedules = 100

// BenchmarkScheduleFires runs 100 seats with the scripted model at zero
// delay and 100 schedules, one per seat, all on the same minute
// ("* * * * *"), and reports, over one minute's 100 fires, scheduled fire
// time → reply recorded (p50, max), and its two parts: scheduled fire time
// → the fire's workflow started by Temporal's scheduler (start-p50-ms), and
// that start → reply, crewlet's own part (start-to-reply-p50-ms).
//
//	go test ./internal/e2e -run '^$' -bench ScheduleFires -benchtime 1x -timeout 20m
func BenchmarkScheduleFires(b *testing.B) {
	path := fleetOrg(b, benchSchedules, 0)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintln(f, "schedules:")
	for i := 1; i <= benchSchedules; i++ {
		fmt.Fprintf(f, "  - { name: b%03d, cron: \"* * * * *\", to: s%02d, text: \"minute report %d\" }\n", i, i, i)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	c := newCompany(b, path)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := 1; i <= benchSchedules; i++ {
			_ = c.temporal.ScheduleClient().GetHandle(ctx, schedules.ID(c.taskQueue, fmt.Sprintf("b%03d", i))).Delete(ctx)
		}
	})
	c.setenv("CREWLET_API_MUTATIONS_PER_MINUTE=0", "CREWLET_MAILBOX_SENDER_PER_MINUTE=0")
	c.serve()
	c.waitAttached(2 * time.Minute)
	// The first whole minute after every schedule exists: fires of an
	// earlier minute may have met seats still establishing.
	testenv.Eventually(b, time.Minute, "every schedule in Temporal", func() error {
		var list []wire.Schedule
		if err := c.call(http.MethodGet, "/schedules", nil, &list); err != nil {
			return err
		}
		for _, s := range list {
			if s.Error != "" {
				return fmt.Errorf("%s: %s", s.Name, s.Error)
			}
		}
		return nil
	})
	minute := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	b.ResetTimer()
	var replies, starts, own []time.Duration
	for i := 1; i <= benchSchedules; i++ {
		name := fmt.Sprintf("b%03d", i)
		testenv.Eventually(b, 3*time.Minute, name+" answered its fire at "+minute.Format(time.RFC3339), func() error {
			var d wire.ScheduleDetail
			if err := c.call(http.MethodGet, "/schedules/"+name, nil, &d); err != nil {
				return err
			}
			var fire *wire.ScheduleFire
			for j := range d.History {
				if d.History[j].FireTime.Equal(minute) {
					fire = &d.History[j]
				}
			}
			if fire == nil {
				return fmt.Errorf("no fire at %s yet", minute)
			}
			for _, conv := range c.conversation(fire.EventID) {
				for _, m := range conv.Messages {
					if m.InReplyTo == fire.EventID {
						replies = append(replies, m.RecordedAt.Sub(minute))
						for _, r := range d.Recent {
							if r.ScheduledAt.Equal(minute) {
								starts = append(starts, r.StartedAt.Sub(minute))
								own = append(own, m.RecordedAt.Sub(r.StartedAt))
							}
						}
						return nil
					}
				}
			}
			return fmt.Errorf("fire at %s not answered yet", minute)
		})
	}
	b.StopTimer()
	sort.Slice(replies, func(i, j int) bool { return replies[i] < replies[j] })
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	sort.Slice(own, func(i, j int) bool { return own[i] < own[j] })
	p50, most := replies[len(replies)/2], replies[len(replies)-1]
	b.ReportMetric(float64(p50.Milliseconds()), "p50-ms")
	b.ReportMetric(float64(most.Milliseconds()), "max-ms")
	if len(starts) == 0 {
		b.Fatal("Temporal listed none of the fires among the schedules' recent actions")
	}
	startP50, ownP50 := starts[len(starts)/2], own[len(own)/2]
	b.ReportMetric(float64(startP50.Milliseconds()), "start-p50-ms")
	b.ReportMetric(float64(ownP50.Milliseconds()), "start-to-reply-p50-ms")
	b.Logf("%d schedules on one minute: fire → reply p50 %s, max %s; fire → workflow start p50 %s, workflow start → reply p50 %s (%d starts seen)",
		benchSchedules, p50, most, startP50, ownP50, len(starts))
}
