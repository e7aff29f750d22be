package filter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
)

// The limits of a filter, in one place: what `relay sub add --filter`
// accepts and what one evaluation may spend.
const (
	// MaxLength bounds an expression's length in bytes: a filter is a
	// condition on an event, not a program, and the fan-out evaluates it
	// for every event of its types.
	MaxLength = 4096
	// MaxSteps bounds one evaluation's loop steps (the elements `exists`,
	// `all`, `map` and `filter` visit, over all its loops): a filter
	// looping over a large array of the body, or nesting two such loops,
	// is stopped there, as [Failed] (the event does not match), rather
	// than hold the fan-out. A count, not a time, so that a filter's
	// verdict does not depend on how busy the host is; 100,000 steps take
	// tens of milliseconds. (CEL's cost limit was tried: its tracking alone
	// made a loop over 10,000 elements take 159 ms instead of 4.)
	MaxSteps = 100_000
)

// The variables a filter reads.
const (
	// VarBody is the event's body, parsed as JSON: objects are maps,
	// numbers doubles, as CEL's JSON values are.
	VarBody = "body"
	// VarType is the event type, the subject after "events.".
	VarType = "type"
	// VarHeaders is the event's NATS headers, each name to its first
	// value, names as published.
	VarHeaders = "headers"
)

// ErrInvalid is wrapped by [Compile]'s errors: the expression is not a
// valid filter. The message carries CEL's, with the line and column.
var ErrInvalid = errors.New("filter: invalid expression")

// Filter is a compiled content filter: a CEL expression of type bool over
// an event's body, type and headers. It is immutable and safe for
// concurrent use.
type Filter struct {
	expr string
	prog cel.Program
}

// stopped is a context done from the start: CEL looks at it only every
// MaxSteps loop steps (cel.InterruptCheckFrequency), so an evaluation
// over it ends at its MaxSteps-th step, and one with fewer never looks.
var stopped = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// environment is the one CEL environment every filter is compiled in:
// building it costs more than compiling an expression.
var environment = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable(VarBody, cel.DynType),
		cel.Variable(VarType, cel.StringType),
		cel.Variable(VarHeaders, cel.MapType(cel.StringType, cel.StringType)),
		// JSON numbers are doubles: `body.amount > 100` compares a double
		// with an int, as a user writes it.
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(MaxLength),
	)
})

// Compile parses and type-checks expr. A syntax or type error, an
// expression longer than [MaxLength] or one that is not a bool is an
// error wrapping [ErrInvalid] with CEL's message.
func Compile(expr string) (*Filter, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, fmt.Errorf("%w: empty (give a CEL expression such as body.status == \"paid\")", ErrInvalid)
	}
	if len(expr) > MaxLength {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalid, len(expr), MaxLength)
	}
	env, err := environment()
	if err != nil {
		return nil, fmt.Errorf("filter: building the CEL environment: %w", err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, oneLine(iss.Err().Error()))
	}
	if !ast.OutputType().IsExactType(types.BoolType) && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("%w: must be true or false, got an expression of type %s", ErrInvalid, ast.OutputType())
	}
	if err := literalPatterns(ast); err != nil {
		return nil, err
	}
	prog, err := env.Program(ast, cel.InterruptCheckFrequency(MaxSteps), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, oneLine(err.Error()))
	}
	return &Filter{expr: expr, prog: prog}, nil
}

// literalPatterns refuses a matches() whose pattern is not written in the
// expression: a pattern taken from the event (body.s.matches(body.p)) is
// compiled and run in one call that nothing can interrupt, and a long one
// took seconds. A pattern in the expression is at most MaxLength bytes,
// and Go's regular expressions run in time linear in the text.
func literalPatterns(a *cel.Ast) error {
	for _, e := range celast.MatchDescendants(celast.NavigateAST(a.NativeRep()), celast.FunctionMatcher(overloads.Matches)) {
		args := e.AsCall().Args()
		if len(args) == 0 || args[len(args)-1].Kind() != celast.LiteralKind {
			return fmt.Errorf("%w: matches() takes a pattern written in the filter, a string in quotes, not one from the event", ErrInvalid)
		}
	}
	return nil
}

// oneLine joins CEL's multi-line message (the error, the source line, a
// caret under the column) into one line for a CLI's stderr: "at 1:25:
// Syntax error: … | body.status == | ..............^".
func oneLine(s string) string {
	var parts []string
	for l := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		l = strings.TrimPrefix(strings.TrimRight(l, " "), " | ")
		l = strings.ReplaceAll(l, " (in container '')", "")
		if l = strings.TrimPrefix(l, "ERROR: <input>:"); l == "" {
			continue
		}
		parts = append(parts, l)
	}
	if len(parts) > 0 && len(parts[0]) > 0 && parts[0][0] >= '0' && parts[0][0] <= '9' {
		parts[0] = "at " + parts[0]
	}
	return strings.Join(parts, " | ")
}

// Reason is err's message without the [ErrInvalid] prefix: what a flag's
// error says after the flag's name.
func Reason(err error) string {
	return strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")
}

// String is the expression as given.
func (f *Filter) String() string { return f.expr }

// Match evaluates the filter over ev. Only [Matched] sends the event to
// the subscriber; the others say why not, for the metrics. An expression
// that needed the body of an event whose body is not JSON is [NotJSON]
// unless it was true without it.
func (f *Filter) Match(ev *Event) Result {
	ev.bodyRead = false
	out, _, err := f.prog.ContextEval(stopped, ev)
	if err == nil {
		if b, ok := out.Value().(bool); ok && b {
			return Matched
		}
	}
	switch {
	case ev.bodyRead && ev.body == bodyNotJSON:
		return NotJSON
	case err != nil:
		return Failed
	}
	return NotMatched
}
