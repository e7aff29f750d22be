// Package filter is relay's content filters: a subscriber's CEL expression
// (`relay sub add --filter`) over an event's JSON body, its type and its
// headers, such as `body.status == "paid" && body.amount > 100`. The
// fan-out evaluates it after the event-type filter, for the subscribers that
// have one; an event it does not match gets no copy for that subscriber.
//
// CEL (github.com/google/cel-go) is the language of Kubernetes' and Envoy's
// policies: non-Turing-complete, type-checked when the filter is stored, and
// its evaluation is bounded ([MaxSteps] loop steps). A body is parsed at most once per
// event, whatever the number of filters, and only if one reads it.
package filter
