package filter

// Result is what one filter made of one event. Only Matched delivers it.
type Result uint8

const (
	// Matched: the expression was true; the subscriber gets the event.
	Matched Result = iota
	// NotMatched: the expression was false.
	NotMatched
	// NotJSON: the expression needed the body, which is not JSON.
	NotJSON
	// Failed: the evaluation ended in an error, such as a field the body
	// lacks (`has(body.x)` tests for one), a type mismatch or the
	// [MaxSteps] bound. The event does not match.
	Failed
)

// String names the result as the metrics label it.
func (r Result) String() string {
	switch r {
	case Matched:
		return "matched"
	case NotMatched:
		return "not_matched"
	case NotJSON:
		return "body_not_json"
	case Failed:
		return "error"
	}
	return "unknown"
}
