package lanes

import (
	"fmt"
	"testing"
)

// TestBusySchedulersAreTheOnesThatHold: of a lane's schedulers, only those
// that hold or send are listed for its keep-alive rounds, however many idle
// ones it keeps: a lane of a hundred thousand subscribers, all idle, renews
// nothing for them. A scheduler
// joins the list as it holds a delivery and leaves it as it holds none.
func TestBusySchedulersAreTheOnesThatHold(t *testing.T) {
	l := &lane{scheds: make(map[string]*scheduler)}
	for i := range 1000 {
		l.scheduler(fmt.Sprintf("idle-%04d", i))
	}
	s := l.scheduler("holds")
	if n := len(l.busySchedulers()); n != 0 {
		t.Fatalf("%d busy schedulers of idle ones", n)
	}
	s.mu.Lock()
	s.holdLocked(delivery{seq: 1})
	s.syncLocked()
	s.mu.Unlock()
	if got := l.busySchedulers(); len(got) != 1 || got[0] != s {
		t.Fatalf("busy: %d schedulers, want the one that holds", len(got))
	}
	s.mu.Lock()
	s.popFrontLocked()
	s.syncLocked()
	s.mu.Unlock()
	if n := len(l.busySchedulers()); n != 0 {
		t.Fatalf("%d busy schedulers once it holds nothing", n)
	}
	if n := len(l.schedulers()); n != 1001 {
		t.Fatalf("%d schedulers, want 1001", n)
	}
}
