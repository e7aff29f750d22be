package status

import (
	"strconv"
	"testing"
)

func TestPagedCutsTheRowsInPages(t *testing.T) {
	t.Parallel()
	rows := make([]Subscriber, 250)
	for i := range rows {
		rows[i].ID = "s" + strconv.Itoa(i)
	}
	for _, c := range []struct {
		limit, number   int
		first, n, pages int
		firstID         string
	}{
		{100, 1, 1, 100, 3, "s0"},
		{100, 2, 101, 100, 3, "s100"},
		{100, 3, 201, 50, 3, "s200"},
		{100, 4, 0, 0, 3, ""},
		{0, 1, 1, 250, 1, "s0"},
		{0, 2, 0, 0, 1, ""},
		{250, 1, 1, 250, 1, "s0"},
		{1000, 1, 1, 250, 1, "s0"},
		{100, 0, 1, 100, 3, "s0"},
	} {
		p := Paged(rows, c.limit, c.number)
		if len(p.Rows) != c.n || p.Pages != c.pages || p.Total != 250 || p.Number != max(c.number, 1) || (c.n > 0 && (p.First != c.first || p.Rows[0].ID != c.firstID)) {
			t.Errorf("Paged(250 rows, %d, %d) = %d rows from %d of %d, %d pages; want %d from %d (%s), %d pages",
				c.limit, c.number, len(p.Rows), p.First, p.Total, p.Pages, c.n, c.first, c.firstID, c.pages)
		}
		if p.Rows == nil {
			t.Errorf("Paged(250 rows, %d, %d) returned nil rows; --json needs []", c.limit, c.number)
		}
	}
	if p := Paged([]Subscriber{}, 100, 1); len(p.Rows) != 0 || p.Pages != 1 || p.Total != 0 {
		t.Errorf("Paged(no rows) = %+v", p)
	}
}
