package evals

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/replay"
)

// judgeOrg's judge passes an answer that says "paid" and fails any other.
const judgeOrg = `company: { name: acme }
profiles:
  judge:
    provider: scripted
    rules:
      - match: '(?s)Answer: .*paid'
        reply: 'PASS: it says the invoice was paid'
      - match: '(?s)Answer: '
        reply: 'FAIL: it never says whether the invoice was paid'
roles:
  clerk: { charter: keeps the ledger, profile: judge }
seats:
  - { handle: s01, role: clerk }
`

// report is a one-thread replay answering answer, its recorded turn
// calling recorded and the replay calling replayed (name=args each).
func report(answer string, recorded, replayed []replay.Call) replay.Report {
	return replay.Report{Turn: "turn/s01/k1", Seat: "s01", Role: "clerk", Threads: []replay.Thread{{
		Trigger: "e1", Recorded: "recorded answer", Replayed: answer,
		RecordedRounds: []replay.RecordedRound{{Round: 1, Calls: recorded}},
		Rounds:         []replay.Round{{Round: 1, Calls: replayed}},
	}}}
}

func call(name, args string) replay.Call { return replay.Call{Name: name, Args: json.RawMessage(args)} }

func TestChecksPassAndFail(t *testing.T) {
	t.Parallel()
	org, err := config.Parse([]byte(judgeOrg))
	if err != nil {
		t.Fatal(err)
	}
	schema := json.RawMessage(`{"type":"object","required":["invoice","paid"],"properties":{"invoice":{"type":"integer"},"paid":{"type":"boolean"}}}`)
	write := call("ledger__write", `{"text": "invoice 7", "n": 1}`)
	cases := []struct {
		name   string
		check  Check
		report replay.Report
		pass   bool
		reason string
	}{
		{"contains pass", Check{Kind: Contains, Text: "invoice 7"}, report("recorded invoice 7", nil, nil), true, ""},
		{"contains fail", Check{Kind: Contains, Text: "invoice 7"}, report("recorded invoice 8", nil, nil), false, `does not contain "invoice 7"`},
		{"regex pass", Check{Kind: Regex, Pattern: `count \d+$`}, report("done, count 12", nil, nil), true, ""},
		{"regex fail", Check{Kind: Regex, Pattern: `count \d+$`}, report("done, count twelve", nil, nil), false, "does not match"},
		{"json_schema pass", Check{Kind: JSONSchema, Schema: schema}, report(`{"invoice": 7, "paid": true}`, nil, nil), true, ""},
		{"json_schema not json", Check{Kind: JSONSchema, Schema: schema}, report(`invoice 7 is paid`, nil, nil), false, "not JSON"},
		{"json_schema invalid", Check{Kind: JSONSchema, Schema: schema}, report(`{"invoice": "7"}`, nil, nil), false, "does not validate"},
		// The same arguments in another key order and spacing hash alike.
		{"same_tools pass", Check{Kind: SameTools}, report("ok", []replay.Call{write}, []replay.Call{call("ledger__write", `{"n":1,"text":"invoice 7"}`)}), true, ""},
		{"same_tools other args", Check{Kind: SameTools}, report("ok", []replay.Call{write}, []replay.Call{call("ledger__write", `{"text":"INV-7","n":1}`)}), false, "call 1"},
		{"same_tools fewer", Check{Kind: SameTools}, report("ok", []replay.Call{write, call("ledger__read_counter", `{}`)}, []replay.Call{write}), false, "call 2 (ledger__read_counter) was not made by the replay"},
		{"judge pass", Check{Kind: Judge, Profile: "judge", Rubric: "says whether it was paid"}, report("invoice 7 is paid", nil, nil), true, "it says the invoice was paid"},
		{"judge fail", Check{Kind: Judge, Profile: "judge", Rubric: "says whether it was paid"}, report("invoice 7 is recorded", nil, nil), false, "never says whether"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if err := Validate([]Check{c.check}, org); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			results, charges, err := Grader{Org: org}.Score(context.Background(), []Check{c.check}, c.report, "opal")
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != 1 || results[0].Pass != c.pass || !strings.Contains(results[0].Reason, c.reason) {
				t.Fatalf("results %+v; want pass %v with a reason containing %q", results, c.pass, c.reason)
			}
			if results[0].Check != c.check.Kind {
				t.Errorf("check named %q; want its kind %q", results[0].Check, c.check.Kind)
			}
			judged := c.check.Kind == Judge
			if judged != (len(charges) == 1) || (judged && (charges[0].Profile != "judge" || charges[0].InputTokens == 0 || charges[0].Principal != "opal")) {
				t.Errorf("charges %+v; want one of the judge's call to opal's name for a judge, none otherwise", charges)
			}
		})
	}
}

func TestChecksThatCannotRunAreRefusedAtOnce(t *testing.T) {
	t.Parallel()
	org, err := config.Parse([]byte(judgeOrg))
	if err != nil {
		t.Fatal(err)
	}
	err = Validate([]Check{
		{Kind: Contains},
		{Kind: Regex, Pattern: "(unclosed"},
		{Kind: JSONSchema, Schema: json.RawMessage(`{"type": 7}`)},
		{Kind: Judge, Profile: "nobody", Rubric: "r"},
		{Kind: "vibes"},
	}, org)
	if err == nil {
		t.Fatal("Validate took checks that cannot run")
	}
	for _, want := range []string{"check 1 (contains): text is empty", "check 2 (regex)", "check 3 (json_schema): schema is not a JSON Schema", `check 4 (judge): profile "nobody" is not in the org`, `check 5: kind "vibes" is not one of`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v\nwant it to say %q", err, want)
		}
	}
}

// A replay that ended without an answer fails every answer check, saying
// why, and a judge is not asked.
func TestAReplayWithNoAnswerFailsItsChecks(t *testing.T) {
	t.Parallel()
	org, err := config.Parse([]byte(judgeOrg))
	if err != nil {
		t.Fatal(err)
	}
	r := report("", nil, nil)
	r.Threads[0].Stopped = "stopped after 4 rounds"
	results, charges, err := Grader{Org: org}.Score(context.Background(), []Check{{Kind: Contains, Text: "x"}, {Kind: Judge, Profile: "judge", Rubric: "r"}}, r, "opal")
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range results {
		if res.Pass || !strings.Contains(res.Reason, "stopped after 4 rounds") {
			t.Errorf("%+v; want a failure naming why the replay stopped", res)
		}
	}
	if len(charges) != 0 {
		t.Errorf("charges %+v; want no judge asked", charges)
	}
}

// A turn that answered no trigger has no answer to check: its answer
// checks fail saying so, rather than pass without running; same_tools
// still compares its (empty) calls.
func TestATurnWithNoAnswerFailsItsAnswerChecks(t *testing.T) {
	t.Parallel()
	org, err := config.Parse([]byte(judgeOrg))
	if err != nil {
		t.Fatal(err)
	}
	r := report("", nil, nil)
	r.Threads = nil
	results, charges, err := Grader{Org: org}.Score(context.Background(),
		[]Check{{Kind: Contains, Text: "x"}, {Kind: Regex, Pattern: "^y"}, {Kind: Judge, Profile: "judge", Rubric: "r"}, {Kind: SameTools}}, r, "opal")
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range results[:3] {
		if res.Pass || res.Reason != NoAnswerToCheck {
			t.Errorf("%+v; want a failure saying there is no answer to check", res)
		}
	}
	if !results[3].Pass {
		t.Errorf("same_tools on a turn without calls: %+v; want a pass", results[3])
	}
	if len(charges) != 0 {
		t.Errorf("charges %+v; want no judge asked", charges)
	}
}
