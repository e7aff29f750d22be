package lanes

import "testing"

// TestStateString proves the names a delivery's states are logged under,
// one for each.
func TestStateString(t *testing.T) {
	t.Parallel()
	seen := map[string]State{}
	for st := Pulled; st <= Removed; st++ {
		name := st.String()
		if name == "unknown" {
			t.Errorf("State(%d) has no name", st)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("States %d and %d are both %q", other, st, name)
		}
		seen[name] = st
	}
	if got := (Removed + 1).String(); got != "unknown" {
		t.Errorf("State(%d).String() = %q, want unknown", Removed+1, got)
	}
}
