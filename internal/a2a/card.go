package a2a

import (
	"slices"
	"strings"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
)

// CardPath is where an agent's card is, below its base URL.
const CardPath = "/.well-known/agent-card.json"

// AgentCard describes an agent: what it does, where and how to reach it.
type AgentCard struct {
	Name                 string                    `json:"name"`
	Description          string                    `json:"description"`
	SupportedInterfaces  []AgentInterface          `json:"supportedInterfaces"`
	Version              string                    `json:"version"`
	Capabilities         AgentCapabilities         `json:"capabilities"`
	SecuritySchemes      map[string]SecurityScheme `json:"securitySchemes"`
	SecurityRequirements []SecurityRequirement     `json:"securityRequirements"`
	DefaultInputModes    []string                  `json:"defaultInputModes"`
	DefaultOutputModes   []string                  `json:"defaultOutputModes"`
	Skills               []AgentSkill              `json:"skills"`
}

// AgentInterface is an endpoint and the binding it speaks.
type AgentInterface struct {
	URL             string `json:"url"`
	ProtocolBinding string `json:"protocolBinding"`
	ProtocolVersion string `json:"protocolVersion"`
}

// AgentCapabilities are the optional parts of A2A an agent serves.
type AgentCapabilities struct {
	Streaming         bool `json:"streaming"`
	PushNotifications bool `json:"pushNotifications"`
}

// SecurityScheme is how a client authenticates: crewlet's bearer tokens.
type SecurityScheme struct {
	HTTPAuth *HTTPAuthSecurityScheme `json:"httpAuthSecurityScheme,omitempty"`
}

// HTTPAuthSecurityScheme is an HTTP Authorization scheme.
type HTTPAuthSecurityScheme struct {
	Description string `json:"description,omitempty"`
	Scheme      string `json:"scheme"`
}

// SecurityRequirement names the schemes a call needs, with their scopes.
type SecurityRequirement struct {
	Schemes map[string]StringList `json:"schemes"`
}

// StringList is a list of strings, as A2A's JSON nests it.
type StringList struct {
	List []string `json:"list"`
}

// AgentSkill is one thing an agent does.
type AgentSkill struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Tags        []string `json:"tags"`
}

// bearerScheme names crewlet's bearer token in a card.
const bearerScheme = "bearer"

// CardVersion is the version a card states: of the card's shape, since
// crewlet's binary carries no release version.
const CardVersion = "1"

// card is the frame every card shares: text in and out, streaming, push
// notifications, crewlet's bearer tokens.
func card(name, description, endpoint string, skills []AgentSkill) AgentCard {
	return AgentCard{
		Name: name, Description: description, Version: CardVersion,
		SupportedInterfaces: []AgentInterface{{URL: endpoint, ProtocolBinding: BindingJSONRPC, ProtocolVersion: ProtocolVersion}},
		Capabilities:        AgentCapabilities{Streaming: true, PushNotifications: true},
		SecuritySchemes: map[string]SecurityScheme{bearerScheme: {HTTPAuth: &HTTPAuthSecurityScheme{Scheme: "Bearer",
			Description: "a crewlet API token (an auth.tokens entry, or the local token the API mints), with the right to open tickets: the same token as for POST /tickets"}}},
		SecurityRequirements: []SecurityRequirement{{Schemes: map[string]StringList{bearerScheme: {List: []string{}}}}},
		DefaultInputModes:    []string{"text/plain"},
		DefaultOutputModes:   []string{"text/plain"},
		Skills:               skills,
	}
}

// roleSkill is what a seat of role does: its charter, tagged with its
// role and its tool servers.
func roleSkill(id, name string, org *config.Config, role string) AgentSkill {
	r := org.Roles[role]
	tags := []string{"role:" + role}
	for _, m := range r.MCP {
		tags = append(tags, "tools:"+m.Name)
	}
	description := strings.TrimSpace(r.Charter)
	if description == "" {
		description = "a seat of role " + role
	}
	return AgentSkill{ID: id, Name: name, Description: description, Tags: tags}
}

// SeatCard is the card of an agent seat, reached at endpoint: its one
// skill is its role's charter.
func SeatCard(org *config.Config, seat config.Seat, endpoint string) AgentCard {
	return card(seat.Handle+" at "+org.Company.Name,
		"The seat "+seat.Handle+" of "+org.Company.Name+" (role "+seat.Role+"). A task sent here is a crewlet ticket to it: durable, answered once.",
		endpoint, []AgentSkill{roleSkill(seat.Handle, seat.Handle, org, seat.Role)})
}

// RoleCard is the card of role:R, reached at endpoint: a task goes to the
// role's least busy seat.
func RoleCard(org *config.Config, role, endpoint string) AgentCard {
	return card(crewlet.RolePrefix+role+" at "+org.Company.Name,
		"Any seat of role "+role+" of "+org.Company.Name+": a task sent here is a crewlet ticket to the role's least busy seat.",
		endpoint, []AgentSkill{roleSkill(crewlet.RolePrefix+role, crewlet.RolePrefix+role, org, role)})
}

// CompanyCard is the company's card, reached at endpoint: a skill per
// agent seat and per role, each with a card of its own (seatCard and
// roleCard give their URLs). A message to the company's endpoint names
// its seat or role in the request's metadata "to".
func CompanyCard(org *config.Config, endpoint string, seatCard, roleCard func(string) string) AgentCard {
	var skills []AgentSkill
	var roles []string
	for _, s := range org.AgentSeats() {
		sk := roleSkill(s.Handle, s.Handle, org, s.Role)
		sk.Description += " (its own card: " + seatCard(s.Handle) + ")"
		skills = append(skills, sk)
		if !slices.Contains(roles, s.Role) {
			roles = append(roles, s.Role)
		}
	}
	slices.Sort(roles)
	for _, role := range roles {
		sk := roleSkill(crewlet.RolePrefix+role, crewlet.RolePrefix+role, org, role)
		sk.Description += " (its own card: " + roleCard(role) + ")"
		skills = append(skills, sk)
	}
	return card(org.Company.Name,
		"The company "+org.Company.Name+" run by crewlet. Each skill is a seat or a role:R; send a task to its own card's endpoint, or here with metadata {\"to\": SKILL}.",
		endpoint, skills)
}
