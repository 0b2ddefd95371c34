package store_test

import (
	"testing"
	"time"
)

// A fire claimed twice keeps the seat and event id it was recorded with
// first, as a second run of one fire must; the history lists it newest
// first, answered once recorded, and it ages out with the ledger.
func TestScheduleFires(t *testing.T) {
	st, db, ctx := setupWithConn(t)
	nine := time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)
	first, isFirst, err := st.ClaimScheduleFire(ctx, "standup", nine, "ana", "ev-9", 0)
	if err != nil || !isFirst || first.Seat != "ana" || first.EventID != "ev-9" {
		t.Fatalf("first claim = %+v, first %v, %v; want ana, ev-9, first", first, isFirst, err)
	}
	again, isFirst, err := st.ClaimScheduleFire(ctx, "standup", nine, "ben", "ev-other", 3)
	if err != nil || isFirst || again.Seat != "ana" || again.EventID != "ev-9" || again.SkippedBefore != 0 {
		t.Fatalf("second claim = %+v, first %v, %v; want the first claim's row", again, isFirst, err)
	}
	if _, _, err := st.ClaimScheduleFire(ctx, "standup", nine.Add(time.Hour), "ben", "ev-10", 2); err != nil {
		t.Fatal(err)
	}
	if err := st.ScheduleFireHandled(ctx, "standup", nine); err != nil {
		t.Fatal(err)
	}
	if n, err := st.LastScheduleSkips(ctx, "standup"); err != nil || n != 2 {
		t.Errorf("LastScheduleSkips = %d, %v; want 2", n, err)
	}
	fires, err := st.ScheduleFires(ctx, "standup", 10)
	if err != nil || len(fires) != 2 {
		t.Fatalf("ScheduleFires = %+v, %v; want two", fires, err)
	}
	if !fires[0].FireTime.Equal(nine.Add(time.Hour)) || fires[0].HandledAt != nil || fires[1].HandledAt == nil {
		t.Errorf("history = %+v; want 10:00 unanswered first, then 09:00 answered", fires)
	}
	sqlExec(t, db, ctx, `UPDATE schedule_fires SET fired_at = now() - interval '2 hours' WHERE fire_time = $1`, nine)
	if n, err := st.TrimScheduleFires(ctx, time.Hour); err != nil || n != 1 {
		t.Errorf("TrimScheduleFires = %d, %v; want the one older fire", n, err)
	}
}
