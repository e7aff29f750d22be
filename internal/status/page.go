package status

// DefaultPageSize is how many subscribers `relay status` shows in its table
// when --limit is not given: a screenful or so, read at a glance, whatever
// the number of subscribers.
const DefaultPageSize = 100

// Page is one page of a report's rows, sorted by id as the report is.
type Page struct {
	// Rows are the page's subscribers; empty past the last page.
	Rows []Subscriber
	// First is the position of Rows[0] among all the rows, from 1; Total
	// is how many rows there are in all, Pages how many pages, Number
	// this page's, from 1.
	First, Total, Pages, Number int
}

// Paged returns page number (from 1) of rows, limit rows a page; a limit of
// 0 or less is every row on one page. A page past the last is empty.
func Paged(rows []Subscriber, limit, number int) Page {
	number = max(number, 1)
	p := Page{Total: len(rows), Pages: 1, Number: number}
	if limit <= 0 || limit >= len(rows) {
		if number == 1 {
			p.Rows, p.First = rows, 1
		} else {
			p.Rows = rows[:0]
		}
		return p
	}
	p.Pages = (len(rows) + limit - 1) / limit
	start := min((number-1)*limit, len(rows))
	end := min(start+limit, len(rows))
	p.Rows, p.First = rows[start:end], start+1
	return p
}
