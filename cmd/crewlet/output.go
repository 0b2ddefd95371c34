package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// output is a read command's -o/--output: text for people, json for
// scripts.
type output struct{ format string }

const (
	outputText = "text"
	outputJSON = "json"
)

// outputFlag adds -o/--output to cmd.
func outputFlag(cmd *cobra.Command) *output {
	o := &output{}
	cmd.Flags().StringVarP(&o.format, "output", "o", outputText, "text, or json: the API's answer as it came, for scripts")
	return o
}

// jsonAliasFlag adds to a command with -o the --json it had before -o, as
// its alias.
func jsonAliasFlag(cmd *cobra.Command) {
	cmd.Flags().Var(jsonAlias{cmd.Flags().Lookup("output")}, "json", "the same as -o json")
	cmd.Flags().Lookup("json").NoOptDefVal = "true"
}

// jsonAlias is --json: set, it sets -o to json.
type jsonAlias struct{ output *pflag.Flag }

func (a jsonAlias) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil || !on {
		return err
	}
	return a.output.Value.Set(outputJSON)
}

func (a jsonAlias) String() string { return "false" }

// Type is bool so that the help shows --json as a switch.
func (a jsonAlias) Type() string { return "bool" }

// json reports whether cmd was asked for JSON; an -o it does not know is a
// usage error.
func (o *output) json(cmd *cobra.Command) (bool, error) {
	switch o.format {
	case outputText:
		return false, nil
	case outputJSON:
		return true, nil
	}
	return false, usageErrorf(cmd, "-o %q is not an output format; use text or json", o.format)
}

// readCommand makes cmd a read: GET the route path builds from the
// arguments, then print the answer with text, or with -o json the
// answer's JSON as the API sent it (indented).
func readCommand[T any](c *cli, cmd *cobra.Command, path func(args []string) (string, error), text func(io.Writer, T) error) *cobra.Command {
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		asJSON, err := out.json(cmd)
		if err != nil {
			return err
		}
		p, err := path(args)
		if err != nil {
			return err
		}
		raw, err := c.client().do(cmd.Context(), http.MethodGet, p, nil)
		if err != nil {
			return err
		}
		if asJSON {
			return printRawJSON(c.stdout, raw)
		}
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("decode API response from %s: %w", p, err)
		}
		return text(c.stdout, v)
	}
	return cmd
}

// fixedPath is the path of a read whose route takes no argument.
func fixedPath(p string) func([]string) (string, error) {
	return func([]string) (string, error) { return p, nil }
}

// printRawJSON prints an answer's JSON as printJSON would print its
// decoded value, keeping every field the API sent.
func printRawJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		return fmt.Errorf("the API's answer is not JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := buf.WriteTo(w)
	return err
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
