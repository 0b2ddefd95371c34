// Command testserver is a small stdio MCP server for the tools package tests.
//
// Tools: read_counter (read-only) returns how many writes were counted;
// lookup {text} (read-only) answers "found: TEXT among N writes";
// write {text} appends one JSON line {"key","text"} to TESTSERVER_COUNT_FILE,
// key being the request's _meta "crewlet/idempotency_key"; slow_write is write
// after sleeping TESTSERVER_SLOW (default 5s); fail returns an error result;
// probe_parent {pid, addr, len} tries to read another process's secrets
// through /proc (its environ, cmdline, status and maps, and len bytes of its
// memory at addr, or at the start of its first readable mapping when addr
// is 0) and returns a JSON object with each file's content or the
// error that refused it. read_files {paths} and write_file {path, text}
// read and write files (a sandbox's view, for the tests that confine it).
// TESTSERVER_STUBBORN=1 ignores SIGTERM and keeps running after stdin closes,
// so a client must kill it. TESTSERVER_PID_FILE, when set, receives the
// server's pid at start. TESTSERVER_CALLS_FILE, when set, receives one JSON
// line {"tool","args","key"} for every tool call the server got, whatever
// the tool.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const idempotencyKeyMeta = "crewlet/idempotency_key"

type writeArgs struct {
	Text string `json:"text" jsonschema:"the text to write"`
}

type probeArgs struct {
	PID  int    `json:"pid" jsonschema:"the process to read"`
	Addr uint64 `json:"addr" jsonschema:"an address in its memory; 0 for its first readable mapping"`
	Len  int    `json:"len" jsonschema:"how many bytes to read there"`
}

// probe reads what a process exposes in /proc: "ok: CONTENT" for each file
// read, "error: ERR" for each refused.
func probe(in probeArgs) map[string]string {
	out := map[string]string{}
	dir := fmt.Sprintf("/proc/%d/", in.PID)
	for _, f := range []string{"environ", "cmdline", "status", "maps"} {
		if b, err := os.ReadFile(dir + f); err != nil {
			out[f] = "error: " + err.Error()
		} else {
			out[f] = "ok: " + string(b)
		}
	}
	addr := in.Addr
	if maps, ok := strings.CutPrefix(out["maps"], "ok: "); ok && addr == 0 {
		// "start-end perms ...": the first region it may read.
		for _, line := range strings.Split(maps, "\n") {
			if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], "r") {
				start, _, _ := strings.Cut(f[0], "-")
				addr, _ = strconv.ParseUint(start, 16, 64)
				break
			}
		}
	}
	f, err := os.Open(dir + "mem")
	if err != nil {
		out["mem"] = "error: " + err.Error()
		return out
	}
	defer f.Close()
	buf := make([]byte, in.Len)
	if n, err := f.ReadAt(buf, int64(addr)); err != nil && n == 0 {
		out["mem"] = "error: " + err.Error()
	} else {
		out["mem"] = "ok: " + string(buf[:n])
	}
	return out
}

type readArgs struct {
	Paths []string `json:"paths" jsonschema:"the files to read"`
}

type writeFileArgs struct {
	Path string `json:"path" jsonschema:"the file to write"`
	Text string `json:"text" jsonschema:"what to write in it"`
}

// readFiles reads each path: "ok: CONTENT" or "error: ERR".
func readFiles(in readArgs) map[string]string {
	out := map[string]string{}
	for _, p := range in.Paths {
		if b, err := os.ReadFile(p); err != nil {
			out[p] = "error: " + err.Error()
		} else {
			out[p] = "ok: " + string(b)
		}
	}
	return out
}

// logCalls appends every tools/call request to path, so a test sees which
// calls reached the server, read-only ones included.
func logCalls(path string) mcp.Middleware {
	var mu sync.Mutex
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if call, ok := req.(*mcp.CallToolRequest); ok {
				k, _ := call.Params.GetMeta()[idempotencyKeyMeta].(string)
				line, err := json.Marshal(map[string]any{"tool": call.Params.Name, "args": call.Params.Arguments, "key": k})
				if err != nil {
					return nil, err
				}
				mu.Lock()
				err = appendLine(path, line)
				mu.Unlock()
				if err != nil {
					return nil, err
				}
			}
			return next(ctx, method, req)
		}
	}
}

func appendLine(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type counter struct {
	mu   sync.Mutex
	path string
}

func (c *counter) count() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := os.ReadFile(c.path)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return bytes.Count(b, []byte("\n")), nil
}

func (c *counter) add(key, text string) error {
	if c.path == "" {
		return fmt.Errorf("TESTSERVER_COUNT_FILE is not set")
	}
	line, err := json.Marshal(map[string]string{"key": key, "text": text})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return appendLine(c.path, line)
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func keyOf(req *mcp.CallToolRequest) string {
	k, _ := req.Params.GetMeta()[idempotencyKeyMeta].(string)
	return k
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("testserver: ")
	stubborn := os.Getenv("TESTSERVER_STUBBORN") == "1"
	if stubborn {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	}
	slow := 5 * time.Second
	if v := os.Getenv("TESTSERVER_SLOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			log.Fatalf("TESTSERVER_SLOW: %v", err)
		}
		slow = d
	}
	c := &counter{path: os.Getenv("TESTSERVER_COUNT_FILE")}

	s := mcp.NewServer(&mcp.Implementation{Name: "testserver", Version: "1"}, nil)
	if p := os.Getenv("TESTSERVER_CALLS_FILE"); p != "" {
		s.AddReceivingMiddleware(logCalls(p))
	}
	mcp.AddTool(s, &mcp.Tool{
		Name:        "read_counter",
		Description: "Returns how many writes were counted.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		n, err := c.count()
		if err != nil {
			return nil, nil, err
		}
		return text(strconv.Itoa(n)), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "lookup",
		Description: "Looks the text up among the writes; changes nothing.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in writeArgs) (*mcp.CallToolResult, any, error) {
		n, err := c.count()
		if err != nil {
			return nil, nil, err
		}
		return text(fmt.Sprintf("found: %s among %d writes", in.Text, n)), nil, nil
	})
	write := func(ctx context.Context, req *mcp.CallToolRequest, in writeArgs) (*mcp.CallToolResult, any, error) {
		if err := c.add(keyOf(req), in.Text); err != nil {
			return nil, nil, err
		}
		return text("written: " + in.Text), nil, nil
	}
	mcp.AddTool(s, &mcp.Tool{
		Name:        "write",
		Description: "Counts one write and echoes the text.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false},
	}, write)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "slow_write",
		Description: "Like write, after sleeping TESTSERVER_SLOW. A cancelled call still writes.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in writeArgs) (*mcp.CallToolResult, any, error) {
		// Said on stderr, so a test knows the call reached the server.
		log.Printf("slow_write started")
		time.Sleep(slow)
		return write(ctx, req, in)
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "fail",
		Description: "Always fails.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		r := text("failed on purpose")
		r.IsError = true
		return r, nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "probe_parent",
		Description: "Tries to read a process's environment and memory through /proc.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in probeArgs) (*mcp.CallToolResult, any, error) {
		b, err := json.Marshal(probe(in))
		if err != nil {
			return nil, nil, err
		}
		return text(string(b)), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "read_files",
		Description: "Reads files; a path may be relative to the working directory.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in readArgs) (*mcp.CallToolResult, any, error) {
		b, err := json.Marshal(readFiles(in))
		if err != nil {
			return nil, nil, err
		}
		return text(string(b)), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "write_file",
		Description: "Writes a file; a path may be relative to the working directory.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in writeFileArgs) (*mcp.CallToolResult, any, error) {
		if err := os.WriteFile(in.Path, []byte(in.Text), 0o600); err != nil {
			r := text("error: " + err.Error())
			r.IsError = true
			return r, nil, nil
		}
		return text("ok"), nil, nil
	})

	if p := os.Getenv("TESTSERVER_PID_FILE"); p != "" {
		if err := os.WriteFile(p, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	log.Printf("ready pid=%d stubborn=%v", os.Getpid(), stubborn)
	err := s.Run(context.Background(), &mcp.StdioTransport{})
	if stubborn {
		log.Printf("stdin closed (%v); staying up", err)
		// Keep reading stdin so nothing here depends on it, and never exit.
		go func() { _, _ = bufio.NewReader(os.Stdin).ReadString(0) }()
		select {}
	}
	if err != nil {
		log.Fatal(err)
	}
}
