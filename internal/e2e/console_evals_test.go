package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/evals"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// A recorded turn replayed on the other profile, whose write has other
// arguments: a viewer finds the run in the console's list with its pass
// rate, and on its page the recorded and the replayed answers side by side
// (markup in them shown as text), each check's result with why it failed,
// the totals, and, asked, the diverged write with its arguments.
func TestConsoleEvalRunShowsBothAnswersSideBySide(t *testing.T) {
	c, _ := newEvalCompany(t)
	recorded, turn := c.recordedTurn("record invoice 7 <b>bold</b>")
	var ds wire.Dataset
	if err := c.call(http.MethodPost, "/evals/datasets", wire.DatasetRequest{Name: "ledger",
		DatasetSelector: wire.DatasetSelector{Turns: []string{turn.TurnID}}}, &ds); err != nil {
		t.Fatal(err)
	}
	var run wire.EvalRun
	if err := c.call(http.MethodPost, "/evals/runs", api.EvalRunRequest{Dataset: "ledger", Change: replay.Change{Profile: "other"},
		Checks: []evals.Check{{Kind: evals.Contains, Text: "recorded: written"}, {Kind: evals.SameTools}}}, &run); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the run done", func() error {
		if err := c.call(http.MethodGet, "/evals/runs/"+run.ID, nil, &run); err != nil {
			return err
		}
		if run.Status != wire.EvalDone {
			return fmt.Errorf("status %s", run.Status)
		}
		return nil
	})
	if len(run.Results) != 1 || run.Results[0].Replayed == recorded || run.Totals.Diverged == 0 {
		t.Fatalf("results %+v, totals %+v; want the one turn replayed with a diverged call and another answer than %q", run.Results, run.Totals, recorded)
	}
	replayed := run.Results[0].Replayed

	b := c.browser()
	b.signIn(replayViewerToken)
	b.openPage("evals", "evals")
	row := fmt.Sprintf(`#eval-runs tr:has(a[href=%q])`, "#/evals/"+run.ID)
	b.waitText(row, "profile other")
	b.waitText(row, "0.0% (0 of 1)")
	b.click(row + " a")
	b.waitVisible(`main[data-ready="eval-run"]`)

	card := fmt.Sprintf(`li[data-turn=%q]`, run.Results[0].Turn)
	b.waitText(card+" .recorded pre", recorded)
	b.waitText(card+" .replayed pre", replayed)
	b.waitText(card+` li[data-check="contains"]`, "FAIL")
	b.waitText(card+` li[data-check="same_tools"]`, "FAIL")
	b.waitText("#eval-totals", "0 failed to replay")
	b.waitText("#eval-totals", fmt.Sprintf("%d (never run)", run.Totals.Diverged))
	b.click(card + ` button[data-action="diverged"]`)
	b.waitText(card+" ul.diverged", `round 1: ledger__write {"text":"INV-invoice 7 <b>bold</b>"}`)
	if n := eval[int](b, `document.querySelectorAll("main b").length`); n != 0 {
		t.Fatalf("the answers' markup made %d elements; want it shown as text", n)
	}
	// Side by side: the two answers start on one line, the replayed to the
	// right of the recorded.
	side := eval[bool](b, fmt.Sprintf(`(() => {
		const r = document.querySelector(%q).getBoundingClientRect();
		const p = document.querySelector(%q).getBoundingClientRect();
		return r.top === p.top && p.left >= r.right;
	})()`, card+" .recorded", card+" .replayed"))
	if !side {
		t.Fatalf("the recorded and replayed answers are not side by side")
	}
	b.screenshot("eval-run")
}
