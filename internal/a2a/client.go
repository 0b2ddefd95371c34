package a2a

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/crewlet/crewlet"
)

// The task states of A2A 1.0 that crewlet's own tasks never take but a
// remote agent's may.
const (
	StateSubmitted    = "TASK_STATE_SUBMITTED"
	StateRejected     = "TASK_STATE_REJECTED"
	StateAuthRequired = "TASK_STATE_AUTH_REQUIRED"
)

// Ended reports whether a remote task in state will not move again.
func Ended(state string) bool {
	switch state {
	case StateCompleted, StateFailed, StateCanceled, StateRejected:
		return true
	}
	return false
}

// RemoteError is what a call to a remote agent failed with, in words that
// name no secret. Refused says asking again will not help (the card has
// no JSON-RPC interface, the token is refused, the remote says the call
// is wrong); otherwise the remote could not be reached or failed for now.
type RemoteError struct {
	Refused bool
	Msg     string
}

func (e *RemoteError) Error() string { return e.Msg }

func refused(format string, args ...any) error {
	return &RemoteError{Refused: true, Msg: fmt.Sprintf(format, args...)}
}

func unreachable(format string, args ...any) error {
	return &RemoteError{Msg: fmt.Sprintf(format, args...)}
}

// Client calls one remote agent's JSON-RPC interface, as its card names
// it, with the bearer token the org gives it (none when empty).
type Client struct {
	http     *http.Client
	endpoint string
	token    string
	// Streaming is what the card says: the agent serves SubscribeToTask.
	Streaming bool
	ids       atomic.Int64
}

// maxBodyBytes bounds what is read of a remote's answer.
const maxBodyBytes = 4 << 20

// Dial reads the agent card at cardURL and returns a client of its
// JSON-RPC interface. The token goes only to cardURL's origin: a card
// whose interface is elsewhere is refused, so a card cannot send the
// token to another host.
func Dial(ctx context.Context, hc *http.Client, cardURL, token string) (*Client, error) {
	base, err := url.Parse(cardURL)
	if err != nil {
		return nil, refused("the card_url is not a URL")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cardURL, nil)
	if err != nil {
		return nil, refused("the card_url is not a URL")
	}
	c := &Client{http: hc, token: token}
	body, err := c.do(req, "its agent card")
	if err != nil {
		return nil, err
	}
	var card AgentCard
	if err := json.Unmarshal(body, &card); err != nil {
		return nil, refused("its agent card at %s is not an A2A agent card (JSON): %s", cardURL, crewlet.OneLine(err.Error(), 120))
	}
	var offered []string
	for _, in := range card.SupportedInterfaces {
		if in.ProtocolBinding != BindingJSONRPC {
			offered = append(offered, in.ProtocolBinding)
			continue
		}
		u, err := base.Parse(in.URL)
		if err != nil {
			return nil, refused("its agent card names the JSON-RPC interface %q, which is not a URL", crewlet.OneLine(in.URL, 120))
		}
		if u.Scheme != base.Scheme || u.Host != base.Host {
			return nil, refused("its agent card names a JSON-RPC interface at %s://%s, not on the card's own origin %s://%s: crewlet sends the agent's token only there; fix the card, or set card_url to a card on that origin",
				u.Scheme, u.Host, base.Scheme, base.Host)
		}
		c.endpoint, c.Streaming = u.String(), card.Capabilities.Streaming
		return c, nil
	}
	if len(offered) == 0 {
		offered = []string{"none"}
	}
	return nil, refused("its agent card offers no %s interface (it offers: %s); crewlet speaks A2A over JSON-RPC only", BindingJSONRPC, strings.Join(offered, ", "))
}

// do sends req with the token and reads a 200's body; what, for the
// errors, names what was asked.
func (c *Client) do(req *http.Request, what string) ([]byte, error) {
	resp, err := c.send(req, what)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if err != nil {
		return nil, unreachable("reading %s from %s failed: %s", what, req.URL.Host, netReason(err))
	}
	return body, nil
}

// send sends req with the token; a status other than 200 is an error
// saying what it means for the user.
func (c *Client) send(req *http.Request, what string) (*http.Response, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set(VersionHeader, ProtocolVersion)
	resp, err := c.http.Do(req)
	if err != nil {
		if req.Context().Err() != nil {
			return nil, req.Context().Err()
		}
		return nil, unreachable("%s at %s could not be reached: %s", what, req.URL.Host, netReason(err))
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, refused("%s at %s refused crewlet's credentials (HTTP %d): check the token in the agent's token_env", what, req.URL.Host, resp.StatusCode)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return nil, unreachable("%s at %s answered HTTP %d", what, req.URL.Host, resp.StatusCode)
	}
	return nil, refused("%s at %s answered HTTP %d: check the agent's card_url", what, req.URL.Host, resp.StatusCode)
}

// netReason is a transport error without the URL Go's client puts in it.
func netReason(err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return crewlet.OneLine(err.Error(), 200)
}

// call makes one JSON-RPC call and decodes its result into out.
func (c *Client) call(ctx context.Context, method string, params, out any) error {
	req, err := c.request(ctx, method, params)
	if err != nil {
		return err
	}
	body, err := c.do(req, method)
	if err != nil {
		return err
	}
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  *Error          `json:"error"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return refused("%s: the agent's answer is not JSON-RPC: %s", method, crewlet.OneLine(err.Error(), 120))
	}
	if resp.Error != nil {
		return refused("%s: the agent answered error %d: %s", method, resp.Error.Code, crewlet.OneLine(resp.Error.Message, 300))
	}
	if err := json.Unmarshal(resp.Result, out); err != nil {
		return refused("%s: the agent's result is not what A2A %s says: %s", method, ProtocolVersion, crewlet.OneLine(err.Error(), 120))
	}
	return nil
}

func (c *Client) request(ctx context.Context, method string, params any) (*http.Request, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(Request{JSONRPC: "2.0", ID: json.RawMessage(fmt.Sprint(c.ids.Add(1))), Method: method, Params: p})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// SendMessage sends m and returns the task it made or moved, without
// waiting for it to end. An agent that answers with a message instead of
// a task has answered: the task is completed with that message.
func (c *Client) SendMessage(ctx context.Context, m Message) (Task, error) {
	var out SendMessageResponse
	if err := c.call(ctx, MethodSendMessage, SendMessageRequest{Message: &m, Configuration: SendMessageConfiguration{ReturnImmediately: true}}, &out); err != nil {
		return Task{}, err
	}
	switch {
	case out.Task != nil:
		return *out.Task, nil
	case out.Message != nil:
		return Task{ID: m.TaskID, ContextID: out.Message.ContextID, Status: TaskStatus{State: StateCompleted, Message: out.Message}}, nil
	}
	return Task{}, refused("%s: the agent's result holds neither a task nor a message", MethodSendMessage)
}

// GetTask returns the remote task id.
func (c *Client) GetTask(ctx context.Context, id string) (Task, error) {
	var t Task
	return t, c.call(ctx, MethodGetTask, TaskRequest{ID: id}, &t)
}

// CancelTask asks the remote to cancel task id.
func (c *Client) CancelTask(ctx context.Context, id string) (Task, error) {
	var t Task
	return t, c.call(ctx, MethodCancelTask, TaskRequest{ID: id}, &t)
}

// Subscribe streams task id's updates to each until it returns false, the
// stream ends, or ctx is done (then it returns nil).
func (c *Client) Subscribe(ctx context.Context, id string, each func(StreamResponse) bool) error {
	req, err := c.request(ctx, MethodSubscribeToTask, TaskRequest{ID: id})
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.send(req, MethodSubscribeToTask)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 64<<10), maxBodyBytes)
	var data []byte
	for lines.Scan() {
		line := lines.Bytes()
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(d, []byte(" "))...)
			continue
		}
		if len(line) > 0 || len(data) == 0 {
			continue
		}
		var ev struct {
			Result StreamResponse `json:"result"`
			Error  *Error         `json:"error"`
		}
		err := json.Unmarshal(data, &ev)
		data = data[:0]
		switch {
		case err != nil:
			return refused("%s: an event of the agent's stream is not JSON-RPC: %s", MethodSubscribeToTask, crewlet.OneLine(err.Error(), 120))
		case ev.Error != nil:
			return refused("%s: the agent answered error %d: %s", MethodSubscribeToTask, ev.Error.Code, crewlet.OneLine(ev.Error.Message, 300))
		}
		if !each(ev.Result) {
			return nil
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := lines.Err(); err != nil {
		return unreachable("%s: the agent's stream broke: %s", MethodSubscribeToTask, netReason(err))
	}
	return nil
}

// StatusOfUpdate is the task status an update of a stream carries; ok is
// false for one that carries none (an artifact).
func StatusOfUpdate(ev StreamResponse) (TaskStatus, bool) {
	switch {
	case ev.Task != nil:
		return ev.Task.Status, true
	case ev.StatusUpdate != nil:
		return ev.StatusUpdate.Status, true
	}
	return TaskStatus{}, false
}

// StatusText is the text of a status's message.
func StatusText(st TaskStatus) string {
	if st.Message == nil {
		return ""
	}
	var texts []string
	for _, p := range st.Message.Parts {
		if p.Text != nil {
			texts = append(texts, *p.Text)
		}
	}
	return strings.Join(texts, "\n\n")
}

// TextOf is what a remote task says: its artifacts' text once completed,
// else its status message's.
func TextOf(t Task) string {
	var texts []string
	if t.Status.State == StateCompleted {
		for _, a := range t.Artifacts {
			for _, p := range a.Parts {
				if p.Text != nil {
					texts = append(texts, *p.Text)
				}
			}
		}
	}
	if len(texts) == 0 {
		return StatusText(t.Status)
	}
	return strings.Join(texts, "\n\n")
}
