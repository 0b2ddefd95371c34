package workflows_test

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/crewlet/crewlet/workers"
)

// corpus is every history recorded in testdata and the path it covers.
// Each is replayed against the current workflows: a change that would break
// running executions fails here; guard it with workflow.GetVersion
// (docs/versioning.md) and record a new history beside these, from an e2e
// run with CREWLET_E2E_HISTORIES=DIR or `temporal workflow show
// --workflow-id seat/cto --output json`.
var corpus = map[string]string{
	"seat_history.json": "`crewlet serve` on the example org, before node-liveness: place, " +
		"attach and hold, four turns (one with diary_write, one with recall), a reply to a human " +
		"seat, pause, two held messages answered in one batch after resume, drain (detach), " +
		"resume (a new tenure), send",
	"seat_failover_history.json": "two workers, before node-liveness; the seat's node is killed " +
		"(its Hold times out, the seat re-establishes on the other node with epoch + 1), a turn, " +
		"then that node is drained and the seat moves to a third (epoch 3), a turn",
	"seat_node_liveness_history.json": "seat/cto at node-liveness 1: place, attach, no Hold, a " +
		"turn with diary_write, pause, resume",
	"seat_attach_in_place_history.json": "seat/cto at node-liveness 2: one workflow task " +
		"establishes it, the placement attaching in place (no Attach activity) and the start's " +
		"search attributes not written again; a turn with diary_write, pause, resume, a second turn",
	"seat_host_lost_history.json": "node-liveness 2, e2e TestDetectorMovesEverySeatOfAKilledNode: " +
		"the seat's node is killed mid-turn, the failure detector's host_lost signal ends the " +
		"tenure, the seat attaches on the other node and runs the turn again",
	"seat_drain_history.json": "node-liveness 2, e2e TestAPIErrorsAreJSONWithTheRightStatus: " +
		"drain (Detach, drained), resume (a new tenure), a turn",
	"seat_move_history.json": "node-liveness 2, e2e TestJoiningNodeGetsItsShareUnderTraffic: " +
		"a turn, then the rebalance duty's move: Detach, Attach on the joining node",
	"seat_stop_history.json": "node-liveness 2, e2e TestWorkersOnDifferentOrgFilesStopNoSeat: " +
		"a move and a lost host, then stop (the seat left the org): the workflow completes",
	"seat_budget_hold_history.json": "node-liveness 2, e2e TestRecordBudgetHoldAndContinueAsNew: " +
		"a turn spends more than the role's day cap, the next turn is held and the seat waits " +
		"for the budget window",
	"seat_continue_as_new_history.json.gz": "node-liveness 2, e2e " +
		"TestRecordBudgetHoldAndContinueAsNew: 200 loop cycles of wakes, then continue-as-new " +
		"after every handler finished (gzipped: 1217 events)",
	"seat_backstop_timer_history.json.gz": "node-liveness 3, e2e TestTurnHistoryDoesNotGrowWithTheConversation: " +
		"20 turns of one conversation with sleeps and wakes between them, all under one backstop " +
		"timer (one TimerStarted, where a timer per sleep started one each time; gzipped: 322 events)",
	"seat_turn_shows_running_history.json": "node-liveness 4, e2e " +
		"TestPausedSeatHoldsMailAndAnswersItInOrderAfterResume: seat/cto attaches, runs a turn " +
		"with no CrewletStatus upsert before or after it (the open turn shows running), pause, " +
		"a wake while paused, resume",
	"seat_unplaceable_history.json": "unplaceable-backoff 1, e2e TestPinnedSeatWaitsForANodeWithItsLabels: " +
		"g1 matches no live node; placements refused, back-off timers of 1, 2, 4, 8 and 16 s " +
		"(status unplaceable upserted once), a wake cancels the 2 s timer and places at once, " +
		"the joining labelled node's wake cancels the 16 s timer, Attach on its host queue, a turn",
	"seat_continued_history.json": "the run that continue-as-new started: attached from its " +
		"carry (no establish), wakes, a turn",
	"seat_pinned_handover_history.json": "node-liveness 5, pinned, e2e " +
		"TestRolloutKeepsAWaitingSeatOnItsBuildAndMovesItAtContinueAsNew: seat/cto on build-old " +
		"runs a turn inline that delegates and waits on its ticket (CrewletTurn, CrewletWaiting), " +
		"build-new becomes current while it waits, the nudge ends the wait, the turn replies, " +
		"and at the loop's top the run continues as new onto the current build",
	"seat_merged_steps_history.json": "node-liveness 6, e2e TestPausedSeatHoldsMailAndAnswersItInOrderAfterResume: " +
		"seat/cto attaches, pause, a wake while paused, resume; the read prepares the turn of the three " +
		"held messages (ReadMail with its preparation), BeginTurn takes the profile slot, three model " +
		"rounds, FinishTurn gives the slot back and acks the mail, an empty read",
	"turn_reflect_history.json": "e2e TestReflectionAfterAKillWritesOnce, after profile-pools " +
		"retired: the turn re-run by the next tenure after its node was killed mid-turn, with no " +
		"version marker: AcquireProfile, a round, Reflect before FinishTurn, ReleaseProfile",
	"turn_pool_history.json": "a Turn at profile-pools 1 (the change retired with its GetVersion call): AcquireProfile before the first " +
		"round, a round asking for diary_write, the tool call, the final round, FinishTurn, " +
		"ReleaseProfile",
	"turn_ticket_wait_history.json": "profile-pools 1, e2e TestDelegationWithDurableWaitAndQuestion: " +
		"a delegate tool call that waits durably on its ticket (timer and ticket signals, the " +
		"profile released meanwhile), an answer, a second wait, the final round",
	"turn_profile_hold_history.json": "profile-pools 1, e2e TestQuotaOutageFailsOverThenHoldsThenRecovers: " +
		"a model round fails as ProfileUnavailable, no profile of the pool can take the turn, it " +
		"is held (timers, profile_free nudges) until the quarantine ends, then runs",
	"turn_cancelled_history.json": "profile-pools 1, e2e TestDrainCancelsATurnLongerThanTheReleaseWait: " +
		"the seat cancels the turn during a model round, which waits for ActivityTaskCanceled " +
		"(WaitForCancellation), releases its profile and ends cancelled",
	"seat_busy_reject_history.json": "busy-policy 1, e2e TestBusyPolicies (on_busy: reject): a turn " +
		"starts, the seat reads at once (new_only, lowering the awake flag), a wake mid-turn, " +
		"ReadMail new_only, BusyMail answers busy, AckMail, the turn finishes",
	"seat_busy_interrupt_history.json": "busy-policy 1, e2e TestBusyPolicies (on_busy: interrupt): a " +
		"wake mid-turn, ReadMail new_only, BusyMail, the interrupt_turn signal to the turn, the turn " +
		"ends interrupted (no ack), the next read and a second turn over both messages",
	"turn_interrupted_history.json": "turn-interrupt 1, e2e TestBusyPolicies: interrupt_turn arrives " +
		"during the first model round, the tool call finishes, InterruptTurn at the round boundary, " +
		"the turn ends interrupted (no FinishTurn)",
	"turn_after_interrupt_history.json": "e2e TestBusyPolicies: the turn after an interrupt, over " +
		"both messages as one thread: round 1 and its tool call read back from Postgres, then a " +
		"round asking for the tool again, its call, the final round, FinishTurn",
	"turn_approval_history.json": "approvals 1, e2e TestApprovalDecisions: a ledger__write an " +
		"approval policy gates answers with its approval, the turn waits (approvals marker, the " +
		"profile released, a timer), the approval signal ends the wait, the call is made again " +
		"and runs, the final round",
	"turn_approval_timeout_history.json": "approvals 1, e2e TestApprovalDecisions: an approval " +
		"nobody decides; its timer fires, EndApproval applies on_timeout (approve), the call is " +
		"made again and runs (recorded while the final round ran)",
	"turn_approval_asked_again_history.json": "approvals 1, e2e TestApprovalDecisions: the " +
		"policy changes while the call waits; approved under the old one, the call answers " +
		"with a new approval and the turn waits a second time, then runs it",
	"turn_approval_failover_history.json": "approvals 1, e2e TestApprovalSurvivesTheSeatsNodeDying: " +
		"the turn re-run by the seat's next tenure after its node was killed adopts the " +
		"pending approval and waits again; the approval signal ends the wait and the call runs",
	"turn_approval_host_lost_history.json": "approvals 1, e2e TestApprovalSurvivesTheSeatsNodeDying: " +
		"the approval is decided as the seat's node is killed; the signal ends the wait, the " +
		"call asked again on the dead host times out and the turn is left to the next tenure",
	"person_notes_history.json": "alice's notes (`crewlet serve` on the example org): two " +
		"tickets she opened end together and make one note",
	"person_notes_checked_history.json": "alice's notes at note-signal-check 1, e2e " +
		"TestPeopleOpenAndFollowTickets: a note, then ticket_note payloads sent straight " +
		"through Temporal (an object and an empty id, dropped; the id of no ticket, left out " +
		"of the note), then two tickets that end together make one note",
	"rebalance_history.json":   "a Rebalance pass, e2e TestJoiningNodeGetsItsShareUnderTraffic",
	"maintenance_history.json": "a Maintenance pass, e2e TestRemovedSeatMailboxIsKeptForTheGraceThenRetired",
	"health_history.json":      "a Health pass, e2e TestSeatHealthStatesFromRealCauses: eng paused → gone, its ticket failed",
	"reconcile_history.json":   "a Reconcile pass that nudged an idle lead, e2e TestIdleLeadNudgedOncePerQuietPeriod",
	"schedule_fire_history.json": "a ScheduleFire its schedule started (fire time from " +
		"TemporalScheduledStartTime), e2e TestScheduleFireSurvivesANodeKill: delivered, then " +
		"answered while it waited",
	"schedule_fire_killed_history.json": "a ScheduleFire started by hand for a fire time, e2e " +
		"TestScheduleFireSurvivesANodeKill: its wait's worker is killed mid-turn and the wait's " +
		"second attempt, on another node, sees the answer",
	"remote_ticket_killed_history.json": "a RemoteTicket, e2e " +
		"TestRemoteAgentAnswerReachesTheDelegatorOnceAcrossAKilledNode: RemoteSend, the streaming " +
		"RemoteAwait's worker killed with kill -9 (its heartbeat times out, the second attempt on " +
		"the next node finds the task completed), RemoteEnd settles the ticket",
	"eval_run_killed_history.json.gz": "an EvalRun, e2e TestEvalRunSurvivesAKilledNodeAndChargesOnce: " +
		"EvalPlan, 50 EvalTurn activities 8 at once, the node running some killed with kill -9 (their " +
		"heartbeats time out and their retries on the other node score them), EvalFinish done " +
		"(gzipped: 278 events)",
	"replay_turn_history.json": "a ReplayTurn, e2e TestLiveReplayRunsTheNewReadOnlyCallOnAWorker: the API's " +
		"replay with live_read_only, its one ReplayTurn activity on a worker node (a lookup run live, a " +
		"write diverged) and the report returned",
	"remote_ticket_asked_history.json": "a RemoteTicket, e2e TestRemoteAgentQuestionIsAnsweredByTheDelegator: " +
		"the remote task goes input-required, RemoteAsk, a recheck timer cancelled by the ticket " +
		"signal of the delegator's answer, RemoteAsk reads it, RemoteSend of the answer on the same " +
		"task, RemoteAwait finds it completed, RemoteEnd",
}

func TestReplaysRecordedHistories(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*_history.json*")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, file := range files {
		found[filepath.Base(file)] = true
		if corpus[filepath.Base(file)] == "" {
			t.Errorf("%s is not in the corpus table: say which path it covers", file)
		}
	}
	for name := range corpus {
		if !found[name] {
			t.Errorf("testdata/%s is missing", name)
		}
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			workers.RegisterWorkflows(r)
			if err := r.ReplayWorkflowHistory(nil, readHistory(t, file)); err != nil {
				t.Fatalf("replay of %s: %v", file, err)
			}
		})
	}
}

// readHistory reads a history as `temporal workflow show --output json`
// writes it, gzipped when the name ends in .gz.
func readHistory(t *testing.T, file string) *historypb.History {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(file, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		r = zr
	}
	h, err := client.HistoryFromJSON(r, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return h
}
