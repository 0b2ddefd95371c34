// Package ui is the operator console: a page of plain ES modules and CSS,
// embedded in the binary and served by the API at /ui/. It calls the same
// API as the CLI with the signed-in person's token, so it shows and does
// only what that token may (docs/operations.md, "The console").
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy lets the page run only its own files: no inline
// script or style, no other origin, no frames, no forms posted anywhere.
// Message text, tool results and seat names are untrusted; the page puts
// them in the DOM as text, and this policy is the second wall.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the console's files under the prefix it is mounted at
// (StripPrefix it first), each with the console's security headers.
func Handler() http.Handler {
	root, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err)
	}
	files := http.FileServer(http.FS(root))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		// The files change with the binary: ask again each time, so an
		// upgraded API never serves a page half old and half new.
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path != "/" && strings.HasSuffix(r.URL.Path, "/") {
			// No directory listings: the console is its index and the
			// files it loads.
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
}
