package service

import (
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Only subjects under _INBOX. may be answered on; no reply, every subject
// of relay's streams, buckets, JetStream's and the system's API and relay's
// own namespace, and every other application's subject, may not.
func TestCheckReply(t *testing.T) {
	t.Parallel()
	for _, reply := range []string{"_INBOX.abc", "_INBOX.abc.1", "_INBOX.x.y.z"} {
		if err := CheckReply(reply); err != nil {
			t.Errorf("CheckReply(%q) = %v, want nil", reply, err)
		}
	}
	if err := CheckReply(""); !errors.Is(err, ErrNoReply) {
		t.Errorf("CheckReply(\"\") = %v, want ErrNoReply", err)
	}
	for _, reply := range []string{"events.x", "events.relay.subscriber.paused", "events", "deliveries.s00.victim",
		"deliveries.overflow.victim", "retries.wait.victim.x", "retries.due.victim", "retries.at.victim.x", "dlq.victim.rejected",
		"bodies.1", "attempts.evt_1", "attempts.failed.victim", "$KV.relay_refill.victim", "$KV.relay_subscribers.victim",
		"$JS.API.STREAM.PURGE.EVENTS", "$JS.ACK.EVENTS.fanout.1.1.1.1.1", "$SYS.REQ.SERVER.PING", "relay.api.sub.test", "relay.x",
		"myapp.replies.1", "relayish.x", "eventsx.y", "_INBOX_admin.x", "_INBOX", "_INBOX.", "_inbox.x", "x._INBOX.y"} {
		if err := CheckReply(reply); !errors.Is(err, ErrReservedReply) {
			t.Errorf("CheckReply(%q) = %v, want ErrReservedReply", reply, err)
		}
	}
}
