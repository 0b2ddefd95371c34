package config

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// RedactedValue is what RedactDocument shows in place of a value written
// inline in the org file; an apply that still holds it is refused, so a
// document read back from GET /config cannot be applied by mistake.
const RedactedValue = "<redacted>"

// RedactDocument is the org file doc with the values it holds inline that
// may be secrets (an MCP server's env: ["KEY=VALUE"]) shown as
// KEY=<redacted>, and the paths of what it redacted. A document with none
// comes back byte for byte; one with some is written out again, comments
// kept.
func RedactDocument(doc []byte) ([]byte, []string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, nil, fmt.Errorf("redact the org file: %w", err)
	}
	var paths []string
	redactNode(&root, "", &paths)
	if len(paths) == 0 {
		return doc, nil, nil
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, nil, fmt.Errorf("redact the org file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, nil, fmt.Errorf("redact the org file: %w", err)
	}
	return out.Bytes(), paths, nil
}

// redactNode redacts under n, whose path is at, appending what it redacted
// to paths. An env list is a stdio MCP server's when the mapping holding it
// also names a command.
func redactNode(n *yaml.Node, at string, paths *[]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			redactNode(c, at, paths)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			redactNode(c, fmt.Sprintf("%s[%d]", at, i), paths)
		}
	case yaml.MappingNode:
		command := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			command = command || n.Content[i].Value == "command"
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i].Value, n.Content[i+1]
			path := strings.TrimPrefix(at+"."+key, ".")
			if key == "env" && command && value.Kind == yaml.SequenceNode {
				for j, entry := range value.Content {
					name, _, ok := strings.Cut(entry.Value, "=")
					if entry.Kind == yaml.ScalarNode && ok {
						entry.Value, entry.Style = name+"="+RedactedValue, yaml.DoubleQuotedStyle
						*paths = append(*paths, fmt.Sprintf("%s[%d]", path, j))
					}
				}
				continue
			}
			redactNode(value, path, paths)
		}
	}
}
