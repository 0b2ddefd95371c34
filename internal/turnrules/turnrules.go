// Package turnrules owns the rules of a turn that need no I/O: which
// triggers of a batch get an answer, the system prompt, how a trigger reads
// to the model (and how that text is read back), and the transcript, ledger
// and memory a finished turn leaves. The turn's activities do the reading
// and writing and ask these rules what to do.
package turnrules

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
)

// Threads picks the triggers of a batch that need an answer, by index, each
// one model conversation of the turn. Replies are recorded, never answered,
// so two seats cannot reply to each other forever; a chat message delivered
// twice in one batch is answered once; a ticket's request is answered only
// while its ticket is open (tickets holds the phase of each ticket the batch
// requests; one missing is not found). Closed lists the requests of tickets
// no longer open: recorded, not worked on.
func Threads(batch []crewlet.Message, tickets map[string]crewlet.TicketPhase) (threads, closed []int) {
	answeredChat := map[string]bool{}
	for i, m := range batch {
		if m.Type == crewlet.MessageReply || (m.ChatID != "" && answeredChat[m.ChatID]) {
			continue
		}
		if m.Type == crewlet.MessageTicket {
			// A ticket cancelled or failed while its request waited is
			// recorded, not worked on.
			if phase, ok := tickets[m.Ticket]; !ok || !phase.Open() {
				closed = append(closed, i)
				continue
			}
		}
		if m.ChatID != "" {
			answeredChat[m.ChatID] = true
		}
		threads = append(threads, i)
	}
	return threads, closed
}

// TriggerText is how a trigger, or a reply the seat received, reads to the
// model.
func TriggerText(m crewlet.Message) string {
	switch m.Type {
	case crewlet.MessageReply:
		return fmt.Sprintf("Reply from %s to your message (conversation %s):\n\n%s", m.From, m.Conversation, m.Body)
	case crewlet.MessageTicket:
		return crewlet.TicketRequestText(crewlet.Ticket{ID: m.Ticket, From: m.From, Conversation: m.Conversation, Task: m.Body})
	case crewlet.MessageTicketNotice:
		return fmt.Sprintf("Notice about your ticket %s (conversation %s):\n\n%s", m.Ticket, m.Conversation, m.Body)
	}
	return fmt.Sprintf("Message from %s (conversation %s):\n\n%s", m.From, m.Conversation, m.Body)
}

// triggerHeader is how TriggerText starts a message or a reply.
var triggerHeader = regexp.MustCompile(`^(?:Message|Reply) from (\S+) (?:to your message )?\(conversation [^)]*\):\s*`)

// ParseTrigger reads back a message's or a reply's text as TriggerText
// wrote it: its sender and what follows the header. ok is false for any
// other text.
func ParseTrigger(text string) (from, body string, ok bool) {
	g := triggerHeader.FindStringSubmatch(text)
	if g == nil {
		return "", text, false
	}
	return g[1], text[len(g[0]):], true
}

// SystemPrompt is the exact system prompt of a seat's turns; its receipt
// (sha-256 and size) is recorded with every round. company may be empty.
func SystemPrompt(handle, roleName, charter, company string) string {
	var b strings.Builder
	if charter != "" {
		b.WriteString(strings.TrimSpace(charter))
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "You are %s, a seat with the role %s", handle, roleName)
	if company != "" {
		fmt.Fprintf(&b, " at %s", company)
	}
	b.WriteString(". Your final answer is sent to whoever wrote to you. Use the tools when you need them; a tool result that says the outcome is unknown means check before trying again.")
	return b.String()
}

// AnswerOf returns a conversation's final answer: the text of its last
// model message, when that message asked for no tool, or its note.
// finished is false while the conversation still waits on a tool.
func AnswerOf(msgs []crewlet.ChatMessage) (text string, finished bool) {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		switch m.Role {
		case "note":
			return m.Content, true
		case "assistant":
			return m.Content, len(m.ToolCalls) == 0
		case "tool":
			return "", false
		}
	}
	return "", false
}

// Closing is what a finished turn leaves: its transcript, the completion
// ledger's keys, and its memory.
type Closing struct {
	// Transcript is each trigger followed by the seat's reply to it, if
	// it has one, so a thread reads in order.
	Transcript []crewlet.Message
	// Ledger holds the completion ledger's keys of every trigger.
	Ledger []string
	// Answered are the triggers' event ids, in batch order.
	Answered []string
	// Replies counts the replies in the transcript.
	Replies int
	// Counterparties are the senders of the triggers the turn answered,
	// sorted.
	Counterparties []string
	// Episode says what was asked and answered, one line per thread.
	Episode string
}

// Close builds what the turn of seat handle over batch leaves, given each
// thread's reply by trigger index (empty where a thread has no text);
// triggers without an entry were recorded, not answered. now stamps the
// replies.
func Close(handle string, batch []crewlet.Message, replies map[int]string, now time.Time) Closing {
	var c Closing
	counterparties := map[string]bool{}
	var exchanges []string
	for i, trigger := range batch {
		c.Ledger = append(c.Ledger, crewlet.LedgerKeys(trigger)...)
		c.Transcript = append(c.Transcript, trigger)
		c.Answered = append(c.Answered, trigger.EventID)
		text, isThread := replies[i]
		if !isThread {
			continue
		}
		counterparties[trigger.From] = true
		exchanges = append(exchanges, exchange(trigger, text))
		if text == "" {
			continue
		}
		// The reply's id is the trigger's, so a trigger answered again in
		// another batch (its turn broke before the ledger) lands once.
		c.Transcript = append(c.Transcript, crewlet.Message{
			EventID:      "reply-" + crewlet.WorkKey([]string{handle, trigger.EventID}),
			Type:         crewlet.MessageReply,
			From:         handle,
			To:           trigger.From,
			Conversation: trigger.Conversation,
			InReplyTo:    trigger.EventID,
			Body:         text,
			SentAt:       now.UTC(),
		})
		c.Replies++
	}
	for who := range counterparties {
		c.Counterparties = append(c.Counterparties, who)
	}
	sort.Strings(c.Counterparties)
	c.Episode = strings.Join(exchanges, "\n")
	if c.Episode == "" {
		c.Episode = "recorded replies only"
	}
	return c
}

// exchange is one line of an episode: who asked what, and the answer.
func exchange(trigger crewlet.Message, reply string) string {
	return fmt.Sprintf("%s asked %q; answered %q", trigger.From, crewlet.OneLine(trigger.Body, EpisodeClip), crewlet.OneLine(reply, EpisodeClip))
}

// EpisodeClip is how much of a trigger and its answer an episode keeps,
// and of a ticket's task a listing shows.
const EpisodeClip = 160

// ReflectionKept returns the diary entry a reflection's answer makes, or
// false when the model said there is nothing worth keeping.
func ReflectionKept(answer string) (string, bool) {
	entry := strings.TrimSpace(answer)
	if entry == "" || strings.EqualFold(strings.Trim(entry, " .!"), "nothing") {
		return "", false
	}
	return entry, true
}
