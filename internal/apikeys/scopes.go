package apikeys

import (
	"fmt"
	"slices"
	"strings"
)

// Scope is a permission a key grants.
type Scope string

// The scopes of DESIGN.md: one per noun and access, and admin for all.
const (
	Publish          Scope = "publish"
	SubscribersRead  Scope = "subscribers:read"
	SubscribersWrite Scope = "subscribers:write"
	DLQRead          Scope = "dlq:read"
	DLQWrite         Scope = "dlq:write"
	EventsRead       Scope = "events:read"
	StatusRead       Scope = "status:read"
	Admin            Scope = "admin"
)

// Scopes is every scope, in the order they are documented.
var Scopes = []Scope{Publish, SubscribersRead, SubscribersWrite, DLQRead, DLQWrite, EventsRead, StatusRead, Admin}

// ScopeNames is [Scopes] as one comma-separated line, for messages and help.
func ScopeNames() string {
	names := make([]string, len(Scopes))
	for i, s := range Scopes {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// ParseScopes reads a comma-separated list of scopes (spaces around each
// allowed) as [CheckScopes] does. It is the one reading of a scope list:
// `relay key add --scopes` and the API call it.
func ParseScopes(list string) ([]Scope, error) {
	var given []Scope
	for part := range strings.SplitSeq(list, ",") {
		if name := strings.TrimSpace(part); name != "" {
			given = append(given, Scope(name))
		}
	}
	return CheckScopes(given)
}

// CheckScopes returns scopes sorted in [Scopes] order without repeats. No
// scope, or one not in [Scopes], is an error wrapping [ErrInvalidScope]
// that names it and the valid ones.
func CheckScopes(scopes []Scope) ([]Scope, error) {
	var out []Scope
	for _, s := range scopes {
		if !slices.Contains(Scopes, s) {
			return nil, fmt.Errorf("%w: %q is not a scope; valid scopes are %s", ErrInvalidScope, string(s), ScopeNames())
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: give at least one of %s", ErrInvalidScope, ScopeNames())
	}
	slices.SortFunc(out, func(a, b Scope) int { return slices.Index(Scopes, a) - slices.Index(Scopes, b) })
	return out, nil
}

// Allows says whether a key with scopes may do what need asks: it has need,
// or admin.
func Allows(scopes []Scope, need Scope) bool {
	return slices.Contains(scopes, need) || slices.Contains(scopes, Admin)
}
