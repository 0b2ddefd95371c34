package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/a2a"
	"github.com/crewlet/crewlet/internal/a2a/push"
)

func pushConfigOf(t *testing.T, what string, ans rpcAnswer) a2a.PushConfig {
	t.Helper()
	if ans.Error != nil {
		t.Fatalf("%s: error %v; want a push notification config", what, ans.Error)
	}
	var c a2a.PushConfig
	if err := json.Unmarshal(ans.Result, &c); err != nil {
		t.Fatalf("%s: %s: %v", what, ans.Result, err)
	}
	return c
}

// A task's webhooks are set, read, listed and deleted by whoever may read
// the task, as GetTask allows; the token is shown only to the call that
// set it, the credentials never; a task that is not there, or a config it
// does not have, is TaskNotFound.
func TestA2APushConfigsBelongToReadersOfTheTask(t *testing.T) {
	base, st := authServer(t)
	ottos := openTicket(t, st, "k-otto-push", crewlet.Ticket{From: crewlet.ExternalSender, To: "cto", Task: "fix it", Conversation: "c-otto-push", OpenedBy: "otto"})
	const seat = "/a2a/seats/cto"

	status, ans := rpc(t, base, seat, tokens["viewer"], a2a.MethodCreatePushConfig,
		`{"taskId":"`+ottos.ID+`","url":"https://203.0.113.5/hook","authentication":{"scheme":"Bearer","credentials":"cred-1"}}`)
	set := pushConfigOf(t, "create as a viewer", ans)
	if status != http.StatusOK || set.ID == "" || set.TaskID != ottos.ID || len(set.Token) < 32 || set.Authentication == nil || set.Authentication.Credentials != "" {
		t.Fatalf("create as a viewer: %d %+v; want an id and a token picked, the credentials not shown", status, set)
	}
	_, ans = rpc(t, base, seat, tokens["operator"], a2a.MethodGetPushConfig, `{"taskId":"`+ottos.ID+`","id":"`+set.ID+`"}`)
	if got := pushConfigOf(t, "get", ans); got.URL != "https://203.0.113.5/hook" || got.Token != "" || got.Authentication.Scheme != "Bearer" {
		t.Fatalf("get: %+v; want the URL and scheme, not the token", got)
	}
	status, ans = rpc(t, base, seat, tokens["member"], a2a.MethodCreatePushConfig, `{"taskId":"`+ottos.ID+`","url":"https://203.0.113.5/bea"}`)
	wantError(t, "create on otto's task by bob's member", status, ans, http.StatusForbidden, a2a.CodeRefused)
	status, ans = rpc(t, base, seat, tokens["member"], a2a.MethodListPushConfigs, `{"taskId":"`+ottos.ID+`"}`)
	wantError(t, "list otto's task's configs by bob's member", status, ans, http.StatusForbidden, a2a.CodeRefused)

	for _, m := range []struct{ method, params string }{
		{a2a.MethodCreatePushConfig, `{"taskId":"t-000000000000","url":"https://203.0.113.5/hook"}`},
		{a2a.MethodGetPushConfig, `{"taskId":"t-000000000000","id":"a"}`},
		{a2a.MethodListPushConfigs, `{"taskId":"t-000000000000"}`},
		{a2a.MethodDeletePushConfig, `{"taskId":"t-000000000000","id":"a"}`},
		{a2a.MethodGetPushConfig, `{"taskId":"` + ottos.ID + `","id":"nope"}`},
		{a2a.MethodDeletePushConfig, `{"taskId":"` + ottos.ID + `","id":"nope"}`},
	} {
		status, ans = rpc(t, base, seat, tokens["operator"], m.method, m.params)
		wantError(t, m.method+" "+m.params, status, ans, http.StatusOK, a2a.CodeTaskNotFound)
	}

	status, ans = rpc(t, base, seat, tokens["operator"], a2a.MethodDeletePushConfig, `{"taskId":"`+ottos.ID+`","id":"`+set.ID+`"}`)
	if status != http.StatusOK || ans.Error != nil || string(ans.Result) != "null" {
		t.Fatalf("delete: %d %s %+v; want a null result", status, ans.Result, ans.Error)
	}
	_, ans = rpc(t, base, seat, tokens["operator"], a2a.MethodListPushConfigs, `{"taskId":"`+ottos.ID+`"}`)
	if ans.Error != nil || string(ans.Result) != `{"configs":[]}` {
		t.Fatalf("list after the delete: %s %+v; want no configs", ans.Result, ans.Error)
	}
}

// A webhook crewlet will not post to is refused with invalid params
// saying what to do, and so is a config past a task's bound.
func TestA2APushConfigRefusesBadWebhooks(t *testing.T) {
	base, st := authServer(t)
	tk := openTicket(t, st, "k-bad-push", crewlet.Ticket{From: crewlet.ExternalSender, To: "cto", Task: "fix it", Conversation: "c-bad-push", OpenedBy: "otto"})
	const seat = "/a2a/seats/cto"
	create := func(config string) (int, rpcAnswer) {
		return rpc(t, base, seat, tokens["operator"], a2a.MethodCreatePushConfig, `{"taskId":"`+tk.ID+`",`+config+`}`)
	}
	for _, c := range []struct{ config, says string }{
		{`"url":"ftp://203.0.113.5/hook"`, "not an http or https URL"},
		{`"url":"http://127.0.0.1:9000/hook"`, "a2a.push.allow"},
		{`"url":"http://169.254.169.254/latest/meta-data"`, "link-local"},
		{`"url":"https://203.0.113.5/` + strings.Repeat("a", push.MaxURLBytes) + `"`, "at most"},
		{`"url":"https://203.0.113.5/hook","token":"a\nb"`, "control character"},
		{`"url":"https://203.0.113.5/hook","id":"../x"`, "not an id"},
		{`"url":"https://203.0.113.5/hook","authentication":{"credentials":"c"}`, "no scheme"},
	} {
		status, ans := create(c.config)
		if status != http.StatusOK || ans.Error == nil || ans.Error.Code != a2a.CodeInvalidParams || !strings.Contains(ans.Error.Message, c.says) {
			t.Errorf("%s: %d %+v; want invalid params saying %q", c.config, status, ans.Error, c.says)
		}
	}
	for i := range push.MaxConfigsPerTask {
		if _, ans := create(fmt.Sprintf(`"id":"c-%d","url":"https://203.0.113.5/%d"`, i, i)); ans.Error != nil {
			t.Fatalf("config %d: %+v", i, ans.Error)
		}
	}
	status, ans := create(`"id":"one-more","url":"https://203.0.113.5/more"`)
	if status != http.StatusOK || ans.Error == nil || ans.Error.Code != a2a.CodeInvalidParams || !strings.Contains(ans.Error.Message, "DeleteTaskPushNotificationConfig") {
		t.Fatalf("config %d: %d %+v; want invalid params saying to delete one", push.MaxConfigsPerTask+1, status, ans.Error)
	}
	if _, ans := create(`"id":"c-0","url":"https://203.0.113.5/again"`); ans.Error != nil {
		t.Fatalf("setting config c-0 again at the bound: %+v; want it replaced", ans.Error)
	}
}

// SendMessage's configuration sets a webhook on its task, named by the
// message's id; a refused one is refused before the message does
// anything.
func TestA2ASendMessageSetsItsPushConfig(t *testing.T) {
	base, st := authServer(t)
	const seat = "/a2a/seats/cto"
	tk := openTicket(t, st, "k-send-push", crewlet.Ticket{From: crewlet.ExternalSender, To: "cto", Task: "fix it", Conversation: "c-send-push", OpenedBy: "otto"})
	if _, ok, err := st.AskTicket(t.Context(), tk.ID, "which one?", "w:1:0", ""); err != nil || !ok {
		t.Fatalf("ask: %v, %v", ok, err)
	}
	answer := func(id, webhook string) (int, rpcAnswer) {
		return rpc(t, base, seat, tokens["operator"], a2a.MethodSendMessage, `{"message":{"messageId":"`+id+`","taskId":"`+tk.ID+`","role":"ROLE_USER","parts":[{"text":"the blue one"}]},
			"configuration":{"returnImmediately":true,"taskPushNotificationConfig":`+webhook+`}}`)
	}
	for _, c := range []struct{ webhook, says string }{
		{`{"url":"http://10.0.0.1/hook"}`, "a2a.push.allow"},
		{`{"url":"https://203.0.113.5/hook","taskId":"t-111111111111"}`, "leave its taskId out"},
	} {
		status, ans := answer("m-refused", c.webhook)
		if status != http.StatusOK || ans.Error == nil || ans.Error.Code != a2a.CodeInvalidParams || !strings.Contains(ans.Error.Message, c.says) {
			t.Errorf("an answer with webhook %s: %d %+v; want invalid params saying %q", c.webhook, status, ans.Error, c.says)
		}
	}
	if now, err := st.Ticket(t.Context(), tk.ID); err != nil || now.Phase != crewlet.TicketAsking {
		t.Fatalf("after the refused answers the ticket is %s, %v; want it still asking", now.Phase, err)
	}
	_, ans := answer("m-push", `{"url":"https://203.0.113.5/hook","token":"tok-1"}`)
	if task := sentTask(t, ans); task.Status.State != a2a.StateWorking {
		t.Fatalf("the answer with a webhook: %+v; want the task working", task.Status)
	}
	_, ans = rpc(t, base, seat, tokens["operator"], a2a.MethodListPushConfigs, `{"taskId":"`+tk.ID+`"}`)
	var list a2a.ListPushConfigsResponse
	if err := json.Unmarshal(ans.Result, &list); err != nil || len(list.Configs) != 1 || list.Configs[0].ID != "m-push" || list.Configs[0].URL != "https://203.0.113.5/hook" {
		t.Fatalf("the task's configs: %s %v; want the one config m-push", ans.Result, err)
	}
}
