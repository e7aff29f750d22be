package main

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTableFitsAHundredColumns: a table's last column is cut to its start,
// cut to its end or wrapped under itself so that every line fits 100
// columns, and left whole when wide.
func TestTableFitsAHundredColumns(t *testing.T) {
	dial := `connection failed: Post "http://127.0.0.1:1/hooks": dial tcp 127.0.0.1:1: connect: connection refused`
	long := strings.Repeat("word ", 40)
	for _, tt := range []struct {
		name string
		t    table
		last string
		want func(out string) bool
	}{
		{"start kept", table{fit: keepStart}, long, func(out string) bool { return strings.Contains(out, "  word word") && strings.Contains(out, "…") }},
		{"end kept", table{fit: keepEnd}, dial, func(out string) bool {
			return strings.Contains(out, "…") && strings.HasSuffix(out, "connect: connection refused\n")
		}},
		{"wrapped", table{fit: wrap}, long, func(out string) bool {
			return strings.Count(out, "\n") > 2 && strings.Count(out, "word") == 40 && strings.Contains(out, "\n"+strings.Repeat(" ", 35)+"word")
		}},
		{"wide", table{fit: keepEnd, wide: true}, dial, func(out string) bool { return strings.Contains(out, dial) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			tt.t.add("ID", "STATE", "WHAT")
			tt.t.add("a-subscriber-id", "a long state col", tt.last)
			if err := tt.t.flush(&b); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for line := range strings.Lines(out) {
				if n := utf8.RuneCountInString(strings.TrimRight(line, "\n")); n > tableWidth && !tt.t.wide {
					t.Errorf("a line of %d columns: %q", n, line)
				}
			}
			if !tt.want(out) {
				t.Errorf("printed:\n%s", out)
			}
		})
	}
}

// TestWrapLineKeepsItsIndent: a sentence is broken at spaces to fit 100
// columns, its first line keeping its own indent and the others given one.
func TestWrapLineKeepsItsIndent(t *testing.T) {
	var b strings.Builder
	if err := wrapLine(&b, "  Relay-Last-Error: "+strings.Repeat("because ", 30), 4); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "  Relay-Last-Error: because") || !strings.HasPrefix(lines[1], "    because") {
		t.Fatalf("wrapped as:\n%s", b.String())
	}
	for _, l := range lines {
		if utf8.RuneCountInString(l) > tableWidth {
			t.Errorf("a line of %d columns: %q", utf8.RuneCountInString(l), l)
		}
	}
}
