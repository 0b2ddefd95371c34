package mailbox_test

import (
	"testing"
	"time"
)

// Each node's report is kept under its incarnation, stamped by Redis, and
// handed to every other node with how long ago its write was sent; a node
// never reads its own, and a report older than the forget span is dropped.
func TestReportStoreKeepsEachNodesLatestWordWithItsAge(t *testing.T) {
	mb, ctx := setup(t)
	if peers, err := mb.ReportStore(ctx, "n1:a", true, 0, time.Minute, time.Minute); err != nil || len(peers) != 0 {
		t.Fatalf("first report: peers %v, err %v; want none", peers, err)
	}
	if _, err := mb.ReportStore(ctx, "n2:b", false, 0, time.Minute, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.ReportStore(ctx, "n1:a", false, 0, time.Minute, time.Minute); err != nil {
		t.Fatal(err)
	}
	peers, err := mb.ReportStore(ctx, "n2:b", true, 0, time.Minute, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 1 || peers[0].Incarnation != "n1:a" || peers[0].Reached || peers[0].SentAgo < 0 || peers[0].SentAgo > 5*time.Second {
		t.Fatalf("n2 read %+v; want n1's latest report (not reached), just made", peers)
	}
	time.Sleep(20 * time.Millisecond)
	peers, err = mb.ReportStore(ctx, "n1:a", false, 0, time.Minute, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 0 {
		t.Fatalf("n1 read %+v past the forget span; want n2's report dropped", peers)
	}
	peers, err = mb.ReportStore(ctx, "n2:b", true, 0, time.Minute, time.Minute)
	if err != nil || len(peers) != 1 || peers[0].SentAgo < 0 || peers[0].SentAgo > 5*time.Second {
		t.Fatalf("n2 read %+v, %v; want n1's report only (its own was dropped and written anew)", peers, err)
	}
}

// A report is stamped with when its write was sent, not when the report
// arrived: a write that hung 2 s before it failed reads as sent 2 s before
// its report, on Redis's clock.
func TestReportStoreStampsTheWriteBySendTime(t *testing.T) {
	mb, ctx := setup(t)
	if _, err := mb.ReportStore(ctx, "n1:a", false, 2*time.Second, time.Minute, time.Minute); err != nil {
		t.Fatal(err)
	}
	peers, err := mb.ReportStore(ctx, "n2:b", true, 0, time.Minute, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 1 || peers[0].SentAgo < 2*time.Second || peers[0].SentAgo > 7*time.Second {
		t.Fatalf("n2 read %+v; want n1's write sent about 2 s ago", peers)
	}
}

// A node's run of reports that reached Postgres begins with its first such
// write and lasts while they come no further apart than the gap; a report
// that did not reach it ends the run, and the next begins a new one.
func TestReportStoreKeepsWhenEachNodesRunBegan(t *testing.T) {
	mb, ctx := setup(t)
	read := func() (time.Duration, bool) {
		t.Helper()
		peers, err := mb.ReportStore(ctx, "n2:b", false, 0, time.Minute, time.Minute)
		if err != nil || len(peers) != 1 {
			t.Fatalf("n2 read %+v, %v; want n1's report", peers, err)
		}
		return peers[0].RunAgo, peers[0].RunKnown
	}
	if _, err := mb.ReportStore(ctx, "n1:a", true, 3*time.Second, time.Minute, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.ReportStore(ctx, "n1:a", true, 0, time.Minute, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ago, known := read(); !known || ago < 3*time.Second || ago > 8*time.Second {
		t.Fatalf("n1's run began %v ago (known %v); want about 3 s, at its first write", ago, known)
	}
	// A gap longer than the run's allowed: a new run.
	if _, err := mb.ReportStore(ctx, "n1:a", true, 0, time.Microsecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ago, known := read(); !known || ago > 2*time.Second {
		t.Fatalf("n1's run began %v ago (known %v) after a gap; want just now", ago, known)
	}
	if _, err := mb.ReportStore(ctx, "n1:a", false, 0, time.Minute, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, known := read(); known {
		t.Fatal("n1 has a run though its latest write did not reach Postgres")
	}
}
