package main

import (
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// tableWidth is the width every table and every line of relay's output fits
// unless --wide: a terminal's, with room to spare.
const tableWidth = 100

// minLastColumn is the narrowest the last column of a table is cut to,
// whatever the columns before it take.
const minLastColumn = 16

// fit is how a table makes its last column fit tableWidth.
type fit int

const (
	// keepStart keeps the start of the last column: a name, a list.
	keepStart fit = iota
	// keepEnd keeps its end: an error's useful part is its end
	// ("…connect: connection refused"), the start names the request.
	keepEnd
	// wrap breaks it into lines at spaces, under itself: a sentence.
	wrap
)

// table aligns rows of cells, two spaces between columns, and unless wide
// makes each line fit tableWidth by its last column, as fit says. Cells
// are written as given: make them safe with cell first. It holds its rows
// until flush.
type table struct {
	wide bool
	fit  fit
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// flush writes the rows and forgets them.
func (t *table) flush(out io.Writer) error {
	rows := t.rows
	t.rows = nil
	n := 0
	for _, r := range rows {
		n = max(n, len(r))
	}
	widths := make([]int, n)
	for _, r := range rows {
		for i, c := range r[:max(len(r)-1, 0)] {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		if len(r) == 0 {
			continue
		}
		b.Reset()
		indent := 0
		for i, c := range r[:len(r)-1] {
			b.WriteString(c)
			pad := widths[i] - utf8.RuneCountInString(c) + 2
			b.WriteString(strings.Repeat(" ", pad))
			indent += widths[i] + 2
		}
		last := r[len(r)-1]
		room := max(tableWidth-indent, minLastColumn)
		switch {
		case t.wide || utf8.RuneCountInString(last) <= room:
			b.WriteString(last)
		case t.fit == keepEnd:
			b.WriteString(cellEnd(last, room))
		case t.fit == wrap:
			b.WriteString(strings.Join(wrapText(last, room), "\n"+strings.Repeat(" ", indent)))
		default:
			b.WriteString(cell(last, room))
		}
		if _, err := io.WriteString(out, strings.TrimRight(b.String(), " ")+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// cellEnd is cell cut to its last width characters, the cut marked with an
// ellipsis at the start.
func cellEnd(s string, width int) string {
	s = cell(s, 0)
	r := []rune(s)
	if width <= 0 || len(r) <= width {
		return s
	}
	return "…" + string(r[len(r)-width+1:])
}

// wrapText breaks s into lines of at most width characters at spaces; a
// word longer than width has a line of its own, cut.
func wrapText(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) <= width:
			line += " " + w
		default:
			lines = append(lines, cell(line, width))
			line = w
		}
	}
	return append(lines, cell(line, width))
}

// wrapLine writes s, a sentence, in lines that fit tableWidth, the lines
// after the first indented by indent spaces (the first keeps its own). A
// word longer than a line is left whole.
func wrapLine(out io.Writer, s string, indent int) error {
	var lines []string
	lead := s[:len(s)-len(strings.TrimLeft(s, " "))]
	line, width := lead, tableWidth
	for _, w := range strings.Fields(s) {
		if strings.TrimSpace(line) != "" && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) > width {
			lines = append(lines, line)
			line, width = "", tableWidth-indent
		}
		if strings.TrimSpace(line) == "" {
			line += w
		} else {
			line += " " + w
		}
	}
	lines = append(lines, line)
	_, err := io.WriteString(out, strings.Join(lines, "\n"+strings.Repeat(" ", indent))+"\n")
	return err
}

// shortTime is a time as a table within tableWidth shows it: UTC, to the
// second, without the year ("12-08 00:45:56"); --wide and --json have it
// in full.
func shortTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("01-02 15:04:05")
}

// timeLeft is how long until t, to the second, as the tables within
// tableWidth say when a pause ends: "1h59m58s left".
func timeLeft(t, now time.Time) string {
	return max(t.Sub(now), 0).Round(time.Second).String() + " left"
}
