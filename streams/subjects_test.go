package streams_test

import (
	"testing"

	"github.com/relay-dev/relay/streams"
)

// Every subject of every stream relay defines is reserved, so that a
// stream added later cannot be forgotten by the check of a request's reply.
func TestReservedCoversEveryStream(t *testing.T) {
	t.Parallel()
	for _, name := range []string{streams.Events, streams.Deliveries, streams.Retries, streams.DLQ, streams.Bodies, streams.Attempts} {
		cfg, err := streams.Config(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range cfg.Subjects {
			if !streams.Reserved(s) {
				t.Errorf("%s's subjects %q are not reserved", name, s)
			}
		}
	}
	for _, bucket := range []string{streams.SubscribersBucket, streams.RateLimitBucket, streams.TimelinessBucket, streams.RefillBucket} {
		if !streams.Reserved("$KV." + bucket + ".x") {
			t.Errorf("bucket %s is not reserved", bucket)
		}
	}
	if streams.Reserved(streams.ReplySubjects) {
		t.Errorf("%s is reserved", streams.ReplySubjects)
	}
}
