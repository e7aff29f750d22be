// Package receiver is what `relay listen` runs: a local webhook receiver for
// trying relay by hand, and for watching what a subscriber would see.
//
// It owns the `relay listen` section of docs/cli.md and
// plays the subscriber's side of docs/headers.md "What a subscriber receives": it verifies
// the Standard Webhooks signature with the same code that signs it
// ([deliver.Verify]), and prints one block per delivery with the webhook-id,
// how many times that id has arrived (a retry or a replay shows up as
// attempt 2, 3, …), whether the signature held, and the start of the body.
//
// It can also misbehave on purpose, to show the "Delivery rules" at work
// without writing a server: a forced status (--status 429 with --retry-after
// to see a subscriber paused, --status 410 to see it disabled), a random
// share of 500s (--fail-rate) to see retries and their back-off, and a delay
// before every answer (--delay) to see timeouts and the in-flight cap.
//
// Answers, first match wins: a bad signature is 401 (so a misconfigured
// secret is loud); then the forced status; then a simulated failure, 500;
// else 200 with an empty body.
package receiver
