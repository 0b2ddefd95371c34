package mailbox_test

import (
	"testing"
	"time"
)

// Each node's report is kept under its incarnation, stamped by Redis, and
// handed to every other node with its age; a node never reads its own, and
// a report older than the forget span is dropped.
func TestReportStoreKeepsEachNodesLatestWordWithItsAge(t *testing.T) {
	mb, ctx := setup(t)
	if peers, err := mb.ReportStore(ctx, "n1:a", true, time.Minute); err != nil || len(peers) != 0 {
		t.Fatalf("first report: peers %v, err %v; want none", peers, err)
	}
	if _, err := mb.ReportStore(ctx, "n2:b", false, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.ReportStore(ctx, "n1:a", false, time.Minute); err != nil {
		t.Fatal(err)
	}
	peers, err := mb.ReportStore(ctx, "n2:b", true, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 1 || peers[0].Incarnation != "n1:a" || peers[0].Reached || peers[0].Age < 0 || peers[0].Age > 5*time.Second {
		t.Fatalf("n2 read %+v; want n1's latest report (not reached), just made", peers)
	}
	time.Sleep(20 * time.Millisecond)
	peers, err = mb.ReportStore(ctx, "n1:a", false, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 0 {
		t.Fatalf("n1 read %+v past the forget span; want n2's report dropped", peers)
	}
	peers, err = mb.ReportStore(ctx, "n2:b", true, time.Minute)
	if err != nil || len(peers) != 1 || peers[0].Age < 0 || peers[0].Age > 5*time.Second {
		t.Fatalf("n2 read %+v, %v; want n1's report only (its own was dropped and written anew)", peers, err)
	}
}
