package filter

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

func mustCompile(t *testing.T, expr string) *Filter {
	t.Helper()
	f, err := Compile(expr)
	require.NoError(t, err)
	return f
}

func TestCompileRefusesWhatIsNotAFilter(t *testing.T) {
	for expr, want := range map[string]string{
		"":                                       "empty",
		"   ":                                    "empty",
		`body.status == `:                        "Syntax error",
		`body.amount + 1`:                        "true or false",
		`type == 1`:                              "no matching overload",
		`tenant == "a"`:                          "undeclared reference to 'tenant'",
		`headers["a"] > 1`:                       "no matching overload",
		strings.Repeat("true && ", 600) + "true": "more than 4096",
	} {
		_, err := Compile(expr)
		require.ErrorIs(t, err, ErrInvalid, expr)
		require.Contains(t, err.Error(), want, expr)
		require.NotContains(t, err.Error(), "\n", "one line for a CLI's stderr")
	}
}

func TestCompileSaysWhereTheErrorIs(t *testing.T) {
	_, err := Compile(`body.status == "paid" &&`)
	require.ErrorIs(t, err, ErrInvalid)
	require.Contains(t, err.Error(), "1:25", "line and column")
}

// TestMatch: the example and the variables, each on the events a
// user expects it to pass and to stop.
func TestMatch(t *testing.T) {
	h := nats.Header{}
	h.Set("X-Tenant", "acme")
	cases := []struct {
		expr, typ, body string
		want            Result
	}{
		{`body.status == "paid" && body.amount > 100`, "order.paid", `{"status":"paid","amount":150}`, Matched},
		{`body.status == "paid" && body.amount > 100`, "order.paid", `{"status":"paid","amount":100}`, NotMatched},
		{`body.status == "paid" && body.amount > 100`, "order.paid", `{"status":"due","amount":150}`, NotMatched},
		{`body.status == "paid" && body.amount > 100`, "order.paid", `{"amount":150.5,"status":"paid"}`, Matched},
		{`body.amount == 100`, "x", `{"amount":100}`, Matched},
		{`body.status == "paid"`, "x", `not json`, NotJSON},
		{`body.status == "paid"`, "x", ``, NotJSON},
		{`body.status == "paid"`, "x", `{"amount":1}`, Failed}, // no such key
		{`has(body.status) && body.status == "paid"`, "x", `{"amount":1}`, NotMatched},
		{`body.items.exists(i, i.sku == "A1")`, "x", `{"items":[{"sku":"B"},{"sku":"A1"}]}`, Matched},
		{`type.startsWith("order.")`, "order.paid", `not json`, Matched},
		{`type == "order.paid" || body.x == 1`, "order.paid", `not json`, Matched},
		{`headers["X-Tenant"] == "acme"`, "x", `{}`, Matched},
		{`"X-Other" in headers`, "x", `{}`, NotMatched},
		{`body == null`, "x", `null`, Matched},
		{`body.a.b[1] == true`, "x", `{"a":{"b":[false,true]}}`, Matched},
		{`body.n > 1`, "x", `{"n":"2"}`, Failed}, // a string is no number
		// docs/filters.md's examples.
		{`body["content-type"] == "a" && body.customer.id == "c1"`, "x", `{"content-type":"a","customer":{"id":"c1"}}`, Matched},
		{`body.id.matches("^ord_[0-9]+$")`, "x", `{"id":"ord_42"}`, Matched},
		{`body.email.endsWith("@example.com") && size(body.items) == 2`, "x", `{"email":"a@example.com","items":[1,2]}`, Matched},
		{`body.tags.all(t, t != "test")`, "x", `{"tags":["a","test"]}`, NotMatched},
		{`body.tags in ["x", "y"]`, "x", `{"tags":"y"}`, Matched},
		{`body.tags.exists(t, t in ["x", "y"])`, "x", `{"tags":["z","x"]}`, Matched},
		{`body.a == 1 || body.b == 2`, "x", `{"b":2}`, Matched},
	}
	for _, c := range cases {
		got := mustCompile(t, c.expr).Match(NewEvent(c.typ, h, []byte(c.body)))
		require.Equal(t, c.want, got, "%s over %s", c.expr, c.body)
	}
}

// TestMaxStepsStopsAnExpensiveFilter: a filter comparing every pair of a
// body's 3,000 elements (nine million steps) is stopped at MaxSteps, as an
// error, rather than hold the fan-out, however fast the host; loops over
// 3,000 and 99,000 elements are not, however slow it is.
func TestMaxStepsStopsAnExpensiveFilter(t *testing.T) {
	items := make([]string, 3000)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	body := []byte(`{"items":[` + strings.Join(items, ",") + `]}`)
	f := mustCompile(t, `body.items.all(x, body.items.all(y, x == y || x != y))`)
	start := time.Now()
	require.Equal(t, Failed, f.Match(NewEvent("x", nil, body)))
	t.Logf("stopped after %v", time.Since(start))
	cheap := mustCompile(t, `body.items.exists(x, x == 2999.0)`)
	require.Equal(t, Matched, cheap.Match(NewEvent("x", nil, body)))

	long := make([]string, 99_000)
	for i := range long {
		long[i] = "1"
	}
	big := []byte(`{"items":[` + strings.Join(long, ",") + `,2]}`)
	require.Equal(t, Matched, mustCompile(t, `body.items.exists(x, x == 2.0)`).Match(NewEvent("x", nil, big)))
	require.Equal(t, Failed, mustCompile(t, `body.items.exists(x, x == 3.0) || body.items.exists(x, x == 3.0)`).Match(NewEvent("x", nil, big)),
		"the steps of all its loops count")
}

// TestMatchesTakesOnlyAWrittenPattern: a pattern from the event could run
// for seconds in one uninterruptible call: refused when the filter is
// given.
func TestMatchesTakesOnlyAWrittenPattern(t *testing.T) {
	for _, expr := range []string{`body.s.matches(body.p)`, `matches(body.s, headers["P"])`, `type.matches(type)`} {
		_, err := Compile(expr)
		require.ErrorIs(t, err, ErrInvalid, expr)
		require.ErrorContains(t, err, "pattern written in the filter", expr)
	}
	for _, expr := range []string{`body.s.matches("^a+$")`, `matches(type, "^order[.]")`} {
		_, err := Compile(expr)
		require.NoError(t, err, expr)
	}
}

// TestBodyParsedOnceAndOnlyWhenRead: the fan-out evaluates every
// subscriber's filter over one Event; a filter that reads only the type
// leaves the body unparsed, and many that read it parse it once.
func TestBodyParsedOnceAndOnlyWhenRead(t *testing.T) {
	ev := NewEvent("order.paid", nil, []byte(`{"status":"paid"}`))
	require.Equal(t, Matched, mustCompile(t, `type == "order.paid"`).Match(ev))
	require.Equal(t, bodyUnread, ev.body)

	f := mustCompile(t, `body.status == "paid"`)
	require.Equal(t, Matched, f.Match(ev))
	parsed := ev.bodyVal
	for range 10 {
		require.Equal(t, Matched, f.Match(ev))
	}
	require.Same(t, parsed.(interface{ Value() any }), ev.bodyVal.(interface{ Value() any }))

	bad := NewEvent("x", nil, []byte(`{`))
	for range 3 {
		require.Equal(t, NotJSON, f.Match(bad))
	}
	require.Equal(t, Matched, mustCompile(t, `type == "x"`).Match(bad), "a filter that does not read the body is not judged on it")
}

func TestResultNames(t *testing.T) {
	for r, name := range map[Result]string{Matched: "matched", NotMatched: "not_matched", NotJSON: "body_not_json", Failed: "error"} {
		require.Equal(t, name, r.String())
	}
}

func TestInvalidIsASentinel(t *testing.T) {
	_, err := Compile("(")
	require.True(t, errors.Is(err, ErrInvalid))
}

// FuzzCompile: no expression, however broken, panics the compiler or an
// evaluation over any body.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{`body.a == 1`, `has(body.x)`, `type.matches("^a")`, `[1,2].map(x, x*2)[0] == 2`, `"\xff"`, `body.a.b.c[0]`} {
		f.Add(s, []byte(`{"a":1}`))
	}
	f.Fuzz(func(t *testing.T, expr string, body []byte) {
		flt, err := Compile(expr)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			return
		}
		_ = flt.Match(NewEvent("x", nats.Header{"A": {"b"}}, body))
	})
}
