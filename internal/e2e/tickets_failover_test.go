package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
)

// failoverWaitOrg is waitOrg with each role pinned to nodes labelled for it,
// so a test can kill the node of one side and keep the other; lead and eng
// set each side's model delay.
func failoverWaitOrg(lead, eng string) string {
	org := fmt.Sprintf(waitOrg, "30m", lead, eng)
	org = strings.Replace(org, "lead: { charter: leads and delegates, profile: lead }",
		"lead: { charter: leads and delegates, profile: lead, placement: { labels: { side: lead } } }", 1)
	return strings.Replace(org, "engineer: { charter: fixes what it is given, profile: eng }",
		"engineer: { charter: fixes what it is given, profile: eng, placement: { labels: { side: eng } } }", 1)
}

// nodeOf returns the node id the seat's tenure is on.
func (c *company) nodeOf(handle string) string {
	c.t.Helper()
	for _, s := range c.seats() {
		if s.Handle == handle {
			return strings.SplitN(s.Node, ":", 2)[0]
		}
	}
	c.t.Fatalf("no seat %s", handle)
	return ""
}

// openTicketFrom returns the ticket cto delegated, once there is one.
func (c *company) openTicketFrom(from string) crewlet.Ticket {
	c.t.Helper()
	var tk crewlet.Ticket
	testenv.Eventually(c.t, 30*time.Second, "a ticket from "+from, func() error {
		ts := c.tickets("from=" + from)
		if len(ts) == 0 {
			return fmt.Errorf("none yet")
		}
		tk = ts[0]
		return nil
	})
	return tk
}

// assertSettledOnce checks the person got one reply carrying eng-1's answer
// and the ticket settled done once, with no waiter left on it.
func (c *company) assertSettledOnce(ask crewlet.Message) {
	c.t.Helper()
	reply := c.waitReply(ask, 90*time.Second)
	if !strings.Contains(reply, "Fixed the build. Answer from cto:\n\nuse the staging config") {
		c.t.Fatalf("cto's answer %q; want eng-1's reply carrying cto's answer", reply)
	}
	c.waitAnswered(30*time.Second, ask.To)
	if replies := c.repliesTo(ask); len(replies) != 1 {
		c.t.Fatalf("replies to the person: %q; want one", replies)
	}
	ts := c.tickets("from=cto")
	if len(ts) != 1 || ts[0].Phase != crewlet.TicketDone || ts[0].Answer != "use the staging config" {
		c.t.Fatalf("tickets = %+v; want one done with cto's answer", ts)
	}
}

// eng-1's node is killed while eng-1's turn waits for cto's answer: eng-1
// fails over to the other engineers' node, its turn re-runs to the same
// question without asking it again, takes cto's answer, and the ticket
// settles once.
func TestTicketWaitSurvivesTheAskersNodeDying(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", failoverWaitOrg("4s", "0s")))
	c.apiServer()
	c.worker("lead", "--labels", "side=lead")
	engNodes := map[string]*proc{"e1": c.worker("e1", "--labels", "side=eng"), "e2": c.worker("e2", "--labels", "side=eng")}
	c.waitAttached(60 * time.Second)

	ask := c.send("cto", "get a fix for the build", inConversation("fo-ask-"+testenv.Suffix()))
	tk := c.openTicketFrom("cto")
	testenv.Eventually(t, 30*time.Second, "eng-1 asking", func() error {
		if err := c.call(http.MethodGet, "/tickets/"+tk.ID, nil, &tk); err != nil {
			return err
		}
		if tk.Phase != crewlet.TicketAsking {
			return fmt.Errorf("ticket is %s", tk.Phase)
		}
		return nil
	})
	victim := c.nodeOf("eng-1")
	engNodes[victim].kill(t)
	t.Logf("killed %s while eng-1 waited for an answer on %s", victim, tk.ID)
	c.assertSettledOnce(ask)
	if got := c.nodeOf("eng-1"); got == victim {
		t.Fatalf("eng-1 still on %s", got)
	}
}

// cto's node is killed while cto's turn waits on the ticket: cto fails over
// to the other lead node, its turn re-runs to the same ticket without
// opening another, waits again, and the ticket settles once with one reply
// to the person.
func TestTicketWaitSurvivesTheDelegatorsNodeDying(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", failoverWaitOrg("0s", "5s")))
	c.apiServer()
	leadNodes := map[string]*proc{"l1": c.worker("l1", "--labels", "side=lead"), "l2": c.worker("l2", "--labels", "side=lead")}
	c.worker("eng", "--labels", "side=eng")
	c.waitAttached(60 * time.Second)

	ask := c.send("cto", "get a fix for the build", inConversation("fo-wait-"+testenv.Suffix()))
	testenv.Eventually(t, 30*time.Second, "cto's turn waiting on its ticket", func() error {
		st := c.state("cto")
		if st.Turn == nil || st.Turn.Progress == nil || st.Turn.Progress.Waiting == nil {
			return fmt.Errorf("cto not waiting yet")
		}
		return nil
	})
	victim := c.nodeOf("cto")
	leadNodes[victim].kill(t)
	t.Logf("killed %s while cto's turn waited", victim)
	c.assertSettledOnce(ask)
	if n := len(c.tickets("from=cto")); n != 1 {
		t.Fatalf("%d tickets from cto; want the re-run to reuse the one it opened", n)
	}
}
