package deliver

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWebhookID: the safe alphabet passes as it is; anything else is
// escaped, byte by byte, '~' included; an id too long to escape is hashed.
func TestWebhookID(t *testing.T) {
	long := strings.Repeat("a.", 80)
	for _, tt := range []struct{ id, want string }{
		{"evt_1", "evt_1"},
		{"msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"},
		{"urn:order-42", "urn:order-42"},
		{"EVENTS-17", "EVENTS-17"},
		{"order.42.created", "order~2E42~2Ecreated"},
		{"a b", "a~20b"},
		{"a~2Eb", "a~7E2Eb"},
		{"tab\there", "tab~09here"},
		{"évt", "~C3~A9vt"},
		{"evt\r\nX-Injected: 1", "evt~0D~0AX-Injected:~201"},
		{strings.Repeat("x", MaxWebhookID), strings.Repeat("x", MaxWebhookID)},
	} {
		require.Equal(t, tt.want, WebhookID(tt.id), "WebhookID(%q)", tt.id)
	}
	hashed := WebhookID(long)
	require.True(t, strings.HasPrefix(hashed, "~~"), hashed)
	require.Len(t, hashed, 2+64)
	require.Equal(t, hashed, WebhookID(long), "the same on every call")
	require.NotEqual(t, hashed, WebhookID(long+"a"))
	require.NotEqual(t, WebhookID(strings.Repeat("x", MaxWebhookID+1)), strings.Repeat("x", MaxWebhookID+1))
}

// TestEventIDOf: the webhook-id a receiver logged gives back its event id;
// what no event id escapes to (a lone '~', lower-case hex, an escaped safe
// byte) and the hashed form give none.
func TestEventIDOf(t *testing.T) {
	for _, id := range []string{"evt_1", "order.42.created", "a~2Eb", "évt", "evt\r\nX-Injected: 1"} {
		got, ok := EventIDOf(WebhookID(id))
		require.True(t, ok, "EventIDOf(WebhookID(%q))", id)
		require.Equal(t, id, got)
	}
	for _, w := range []string{"~", "a~2", "a~2e", "a~41", "~~" + strings.Repeat("0", 64), WebhookID(strings.Repeat("a.", 80))} {
		_, ok := EventIDOf(w)
		require.False(t, ok, "EventIDOf(%q)", w)
	}
}

// TestSendMapsTheEventID: a request for an event id with dots, a line
// break and a space carries the mapped webhook-id, signed over it, no
// header of the id's making, and the event id as it is in Relay-Event-Id
// when a header can hold it.
func TestSendMapsTheEventID(t *testing.T) {
	srv, got := recordingServer(t, 200)
	c := newTestClient(t)
	key := testKey(t)
	for _, tt := range []struct{ id, webhookID, eventHeader string }{
		{"order.42.created", "order~2E42~2Ecreated", "order.42.created"},
		{"evt\r\nX-Injected: 1", "evt~0D~0AX-Injected:~201", ""},
		{"plain_1", "plain_1", ""},
	} {
		o := c.Send(t.Context(), Request{URL: srv.URL, ID: tt.id, Body: []byte(`{}`), Keys: [][]byte{key}})
		require.Equal(t, Delivered, o.Class, "%v", o.Err)
		r := <-got
		require.Equal(t, tt.webhookID, r.header.Get("Webhook-Id"))
		require.Equal(t, tt.eventHeader, r.header.Get("Relay-Event-Id"))
		require.Empty(t, r.header.Get("X-Injected"))
		require.NoError(t, Verify([][]byte{key}, r.header.Get("Webhook-Id"), r.header.Get("Webhook-Timestamp"),
			r.header.Get("Webhook-Signature"), r.body, fixedClock(), time.Hour))
	}
}

// FuzzWebhookID checks, for any event id, that its webhook-id is never
// empty, holds no dot, no whitespace and no control or non-ASCII byte, is
// at most MaxWebhookID bytes (or the hashed form's), is the id itself when
// the id is safe, and decodes back to the id when it is escaped: no two ids
// share one.
func FuzzWebhookID(f *testing.F) {
	for _, s := range []string{"evt_1", "order.42.created", "a b", "~", "~~", "évt", "\x00", strings.Repeat("z.", 120)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if id == "" {
			return
		}
		w := WebhookID(id)
		if w == "" || len(w) > max(MaxWebhookID, 66) {
			t.Fatalf("WebhookID(%q) = %q", id, w)
		}
		for i := 0; i < len(w); i++ {
			if c := w[i]; c == '.' || c <= ' ' || c >= 0x7f {
				t.Fatalf("WebhookID(%q) = %q holds byte %#x", id, w, c)
			}
		}
		if strings.HasPrefix(w, "~~") {
			if _, ok := EventIDOf(w); ok {
				t.Fatalf("EventIDOf(%q), a hashed webhook-id, decodes", w)
			}
			return
		}
		back, ok := EventIDOf(w)
		if !ok || back != id {
			t.Fatalf("WebhookID(%q) = %q decodes to %q, %v", id, w, back, ok)
		}
	})
}
