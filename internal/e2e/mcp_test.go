package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
)

// mcpSDK is the MCP client the interop tests drive: the official
// TypeScript SDK, at the version whose tasks (client.experimental.tasks,
// protocol 2025-11-25) crewlet was checked against.
const mcpSDK = "@modelcontextprotocol/sdk@1.32.2"

// mcpOrg has a seat that answers at once, one that takes minutes, and a
// reviewer that asks which part to review first.
const mcpOrg = `company: { name: mcpco }
profiles:
  quick: { provider: scripted, rules: [ { match: '^what is (.*)', reply: 'It is {{index .Groups 1}}' } ] }
  slow: { provider: scripted, delay: 2m, rules: [ { match: '^what is (.*)', reply: 'It is {{index .Groups 1}}, at last' } ] }
  asks:
    provider: scripted
    rules:
      - match: '^please review (.*)'
        tools: [ { name: ask, args: { question: 'which part of {{index .Groups 1}}?' } } ]
        reply: 'Reviewed. {{.Last}}'
roles:
  quick: { charter: answers at once, profile: quick }
  slow: { charter: takes its time, profile: slow }
  reviewer: { charter: reviews what it is given, profile: asks }
seats:
  - { handle: s01, role: quick }
  - { handle: s02, role: slow }
  - { handle: r01, role: reviewer }
`

// interopScript is an MCP client written by nobody here: the official
// TypeScript SDK's, as its README connects one over streamable HTTP.
const interopScript = `import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: "Bearer " + token } },
});
const client = new Client({ name: "crewlet-interop", version: "1.0.0" });
await client.connect(transport);
const { tools } = await client.listTools();
console.log("tools: " + tools.map((t) => t.name).sort().join(" "));
const asked = await client.callTool({ name: "ask_s01", arguments: { text: "what is the answer" } });
console.log("ask_s01: " + asked.content.map((c) => c.text).join(""));
const seats = await client.callTool({ name: "list_seats", arguments: {} });
console.log("list_seats: " + seats.structuredContent.seats.map((s) => s.handle + "=" + s.tool).join(" "));
const seat = await client.readResource({ uri: "crewlet://seats/s01" });
console.log("seat s01: " + JSON.parse(seat.contents[0].text).seat.Handle);
const conv = await client.readResource({ uri: "crewlet://conversations/" + asked.structuredContent.conversation });
console.log("conversation: " + JSON.parse(conv.contents[0].text).messages.map((m) => m.body).join(" | "));
const abort = new AbortController();
const slow = client.callTool({ name: "ask_s02", arguments: { text: "what is slow" } }, undefined, { signal: abort.signal });
setTimeout(() => abort.abort("changed my mind"), 2000);
try {
  await slow;
  console.log("ask_s02: answered");
} catch (e) {
  console.log("ask_s02: " + (abort.signal.aborted ? "cancelled" : "failed: " + e));
}
// The cancel is a notification in flight: closing now could abort its
// POST. The test ends stdin once it has seen the ticket cancelled.
process.stdin.resume();
await new Promise((resolve) => process.stdin.on("end", resolve));
await client.close();
`

// A client nobody here wrote, the official TypeScript SDK's installed from
// npm, lists the tools, asks a seat and gets its reply, lists the seats,
// reads a seat and the ask's conversation, and cancels a second ask, whose
// ticket is then cancelled: one ticket per call.
func TestMCPInteropWithTheTypeScriptSDK(t *testing.T) {
	dir := npmPackage(t, mcpSDK)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	script := filepath.Join(dir, "interop.mjs")
	if err := os.WriteFile(script, []byte(interopScript), 0o600); err != nil {
		t.Fatal(err)
	}

	c := newCompany(t, writeFile(t, "org.yaml", mcpOrg))
	c.serve()
	client := exec.CommandContext(ctx, "node", script, c.api+"/mcp", c.bearer())
	out := &testenv.Log{}
	client.Stdout, client.Stderr = out, out
	stdin, err := client.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- client.Wait() }()
	testenv.Eventually(t, time.Minute, "the client's cancel of ask_s02", func() error {
		select {
		case err := <-exited:
			t.Fatalf("the client exited early (%v):\n%s", err, out)
		default:
		}
		if !strings.Contains(out.String(), "ask_s02: ") {
			return fmt.Errorf("output so far:\n%s", out)
		}
		return nil
	})
	var s02 []crewlet.Ticket
	testenv.Eventually(t, 20*time.Second, "the cancelled call's ticket cancelled", func() error {
		if err := c.call(http.MethodGet, "/tickets?to=s02", nil, &s02); err != nil {
			return err
		}
		if len(s02) != 1 || s02[0].Phase != crewlet.TicketCancelled || !strings.Contains(s02[0].Reason, "the MCP client cancelled its call") {
			return fmt.Errorf("tickets to s02: %+v; want one, cancelled because the client cancelled its call", s02)
		}
		return nil
	})
	_ = stdin.Close()
	if err := <-exited; err != nil {
		t.Fatalf("the client failed: %v\n%s", err, out)
	}
	t.Logf("the TypeScript SDK's client:\n%s", out)
	for _, want := range []string{
		"tools: ask_r01 ask_role_quick ask_role_reviewer ask_role_slow ask_s01 ask_s02 list_seats ticket_status\n",
		"ask_s01: It is the answer\n",
		"list_seats: s01=ask_s01 s02=ask_s02 r01=ask_r01\n",
		"seat s01: s01\n",
		"conversation: what is the answer | It is the answer\n",
		"ask_s02: cancelled\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the client's output lacks %q", want)
		}
	}
	var s01 []crewlet.Ticket
	if err := c.call(http.MethodGet, "/tickets?to=s01", nil, &s01); err != nil {
		t.Fatal(err)
	}
	if len(s01) != 1 || s01[0].Phase != crewlet.TicketDone || s01[0].Reply != "It is the answer" {
		t.Errorf("tickets to s01: %+v; want one, done with the reply the client got", s01)
	}
	var all []crewlet.Ticket
	if err := c.call(http.MethodGet, "/tickets", nil, &all); err != nil || len(all) != 2 {
		t.Errorf("tickets: %d (%v); want two, one per call", len(all), err)
	}
}

// The TypeScript SDK's client of MCP tasks (client.experimental.tasks,
// installed from npm) calls ask_ tools as tasks: one it polls to its
// reply; one whose seat asks a question, which goes input_required and
// reaches the client's elicitation handler with the task's id, whose
// answer answers the ticket and the task completes with the reply; one it
// cancels, once. An unknown task id is a protocol error, and tasks/list
// lists the three. Each task is exactly one ticket.
func TestMCPTasksWithTheTypeScriptSDK(t *testing.T) {
	scriptPath := npmScript(t, mcpSDK, "mcp_tasks_client.mjs")
	c := newCompany(t, writeFile(t, "org.yaml", mcpOrg))
	c.serve()

	// The client's steps take seconds; one that waits for what never
	// comes fails the test in two minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "node", scriptPath, c.api+"/mcp", c.bearer()).CombinedOutput()
	transcript := string(out)
	t.Logf("client transcript:\n%s", transcript)
	if err != nil {
		t.Fatalf("the client failed: %v", err)
	}
	want := []string{
		`(?m)^tasks capability: \{"list":\{\},"cancel":\{\},"requests":\{"tools":\{"call":\{\}\}\}\}$`,
		`(?m)^task tools: ask_r01 ask_role_quick ask_role_reviewer ask_role_slow ask_s01 ask_s02$`,
		`(?m)^ask_s01 created (t-\w+) working$`,
		`(?m)^ask_s01 status (t-\w+) completed$`,
		`(?m)^ask_s01 result: It is the answer$`,
		`(?m)^ask_r01 status (t-\w+) input_required$`,
		`(?m)^elicited for (t-\w+): r01 asks \(ticket (t-\w+)\): which part of the API\?$`,
		`(?ms)^ask_r01 result: Reviewed\. .*?^the auth part$`,
		`(?m)^cancel (t-\w+) cancelled$`,
		`(?m)^get (t-\w+) cancelled$`,
		`(?m)^cancel again: -32602$`,
		`(?m)^get unknown: -32602$`,
		`(?m)^list: t-\w+=cancelled t-\w+=completed t-\w+=completed$`,
		`(?m)^done$`,
	}
	for _, w := range want {
		if !regexp.MustCompile(w).MatchString(transcript) {
			t.Errorf("the transcript has no line matching %s", w)
		}
	}

	all := c.tickets("limit=200")
	if len(all) != 3 {
		t.Fatalf("tickets: %+v; want three, one per task", all)
	}
	for _, tk := range all {
		var ok bool
		switch tk.To {
		case "s01":
			ok = tk.Phase == crewlet.TicketDone && tk.Reply == "It is the answer"
		case "r01":
			ok = tk.Phase == crewlet.TicketDone && tk.Answer == "the auth part" && strings.Contains(tk.Reply, "the auth part")
		case "s02":
			ok = tk.Phase == crewlet.TicketCancelled && strings.Contains(tk.Reason, "the MCP client cancelled its task")
		}
		if !ok || !strings.Contains(transcript, tk.ID) {
			t.Errorf("ticket %s to %s: %s, answer %q, reply %q, reason %q; not as the client saw its task", tk.ID, tk.To, tk.Phase, tk.Answer, tk.Reply, tk.Reason)
		}
	}
}
