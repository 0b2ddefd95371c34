package api

import (
	"encoding/json"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/a2a"
	"github.com/crewlet/crewlet/internal/a2a/push"
	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/store"
)

// A2A push notifications (docs/operations.md, "Push notifications"): a
// task's webhooks are set, read and deleted by whoever may read the task,
// as GetTask checks; internal/a2a/push posts its state changes to them.

// pushTask is the ticket of the task a push config method names, when
// the principal may read it.
func (s *Server) pushTask(c *rpcCall, taskID string) (crewlet.Ticket, error) {
	if err := c.may(authority.ReadTicket); err != nil {
		return crewlet.Ticket{}, err
	}
	return s.a2aTicket(c, taskID)
}

// checkPushConfig checks config, set by the request's principal on task
// taskID ("" for the one the call opens), and fills in its id and token
// when it has none.
func (s *Server) checkPushConfig(c *rpcCall, taskID string, config a2a.PushConfig) (store.PushConfig, error) {
	if taskID != "" && config.TaskID != "" && config.TaskID != taskID {
		return store.PushConfig{}, a2a.Errorf(a2a.CodeInvalidParams, "the push notification config names task %s in a message to task %s; leave its taskId out or make them the same", crewlet.OneLine(config.TaskID, 64), taskID)
	}
	stored := store.PushConfig{ID: config.ID, URL: config.URL, Token: config.Token, CreatedBy: principalOf(c.r).Name}
	if stored.ID == "" {
		stored.ID = push.NewConfigID()
	}
	if err := crewlet.CheckID("push notification config id", stored.ID); err != nil {
		return stored, err
	}
	if stored.Token == "" {
		stored.Token = push.NewToken()
	}
	if err := push.CheckHeaderValue("token", stored.Token, push.MaxSecretBytes); err != nil {
		return stored, err
	}
	if auth := config.Authentication; auth != nil {
		if auth.Scheme == "" {
			return stored, a2a.Errorf(a2a.CodeInvalidParams, "authentication has no scheme; send {scheme: \"Bearer\", credentials: ...}, or leave authentication out")
		}
		if err := push.CheckHeaderValue("authentication.scheme", auth.Scheme, 64); err != nil {
			return stored, err
		}
		if err := push.CheckHeaderValue("authentication.credentials", auth.Credentials, push.MaxSecretBytes); err != nil {
			return stored, err
		}
		stored.AuthScheme, stored.AuthCredentials = auth.Scheme, auth.Credentials
	}
	return stored, push.CheckURL(c.r.Context(), config.URL, s.Org.Now().A2A.Push.Allow)
}

// putPushConfig sets a checked config on ticket; seen is the phase the
// caller answers the client with (a SendMessage's), "" for none. The
// answer shows the token, which is never shown again.
func (s *Server) putPushConfig(c *rpcCall, ticket crewlet.Ticket, config store.PushConfig, seen crewlet.TicketPhase) (a2a.PushConfig, error) {
	config.Ticket = ticket.ID
	stored, err := s.Store.PutPushConfig(c.r.Context(), config, push.MaxConfigsPerTask, seen)
	if err != nil {
		return a2a.PushConfig{}, err
	}
	shown := pushConfigOf(stored)
	shown.Token = stored.Token
	return shown, nil
}

// pushConfigOf is a stored config as A2A shows it: neither its token nor
// its credentials, which any reader of the task could otherwise use to
// forge notifications to its webhook.
func pushConfigOf(c store.PushConfig) a2a.PushConfig {
	out := a2a.PushConfig{ID: c.ID, TaskID: c.Ticket, URL: c.URL}
	if c.AuthScheme != "" {
		out.Authentication = &a2a.Authentication{Scheme: c.AuthScheme}
	}
	return out
}

func (s *Server) a2aCreatePushConfig(c *rpcCall) error {
	var params a2a.PushConfig
	if err := c.params(&params); err != nil {
		return err
	}
	ticket, err := s.pushTask(c, params.TaskID)
	if err != nil {
		return err
	}
	checked, err := s.checkPushConfig(c, "", params)
	if err != nil {
		return err
	}
	config, err := s.putPushConfig(c, ticket, checked, "")
	if err != nil {
		return err
	}
	noteAudit(c.w, "A2A "+c.req.Method+": ticket "+ticket.ID+" config "+config.ID)
	c.result(config)
	return nil
}

// namedPushConfig is the params of GetTaskPushNotificationConfig and
// DeleteTaskPushNotificationConfig, and the task they name, when the
// principal may read it.
func (s *Server) namedPushConfig(c *rpcCall) (a2a.PushConfigRequest, crewlet.Ticket, error) {
	var params a2a.PushConfigRequest
	if err := c.params(&params); err != nil {
		return params, crewlet.Ticket{}, err
	}
	ticket, err := s.pushTask(c, params.TaskID)
	return params, ticket, err
}

func (s *Server) a2aGetPushConfig(c *rpcCall) error {
	params, ticket, err := s.namedPushConfig(c)
	if err != nil {
		return err
	}
	config, err := s.Store.PushConfigOf(c.r.Context(), ticket.ID, params.ID)
	if err != nil {
		return err
	}
	c.result(pushConfigOf(config))
	return nil
}

func (s *Server) a2aListPushConfigs(c *rpcCall) error {
	var params a2a.ListPushConfigsRequest
	if err := c.params(&params); err != nil {
		return err
	}
	ticket, err := s.pushTask(c, params.TaskID)
	if err != nil {
		return err
	}
	configs, err := s.Store.PushConfigs(c.r.Context(), ticket.ID)
	if err != nil {
		return err
	}
	out := a2a.ListPushConfigsResponse{Configs: []a2a.PushConfig{}}
	for _, config := range configs {
		out.Configs = append(out.Configs, pushConfigOf(config))
	}
	c.result(out)
	return nil
}

func (s *Server) a2aDeletePushConfig(c *rpcCall) error {
	params, ticket, err := s.namedPushConfig(c)
	if err != nil {
		return err
	}
	if err := s.Store.DeletePushConfig(c.r.Context(), ticket.ID, params.ID); err != nil {
		return err
	}
	noteAudit(c.w, "A2A "+c.req.Method+": ticket "+ticket.ID+" config "+params.ID)
	c.result(json.RawMessage("null"))
	return nil
}
