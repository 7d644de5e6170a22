package firstboot

import "testing"

func TestStartTicks(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       uint64
		err        bool
	}{
		{"plain", "591 (kiln) S 1 591 591 0 -1 4194560 1224 0 0 0 12 4 0 0 20 0 7 0 2570 1262845952 5069 18446744073709551615", 2570, false},
		{"spaces and parentheses in the name", "77 (a b) c)) R 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 4512 0 0", 4512, false},
		{"truncated", "591 (kiln) S 1 591", 0, true},
		{"no name", "591 kiln S", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := startTicks(tc.stat)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("startTicks(%q) = %d, %v; want %d, error %v", tc.stat, got, err, tc.want, tc.err)
			}
		})
	}
}

func TestProcessTimesOnThisHost(t *testing.T) {
	if got := processTimes("/"); got == "" {
		t.Fatal("no process times from this host's /proc")
	}
	if got := processTimes(t.TempDir()); got != "" {
		t.Fatalf("process times from a root without /proc: %q, want none", got)
	}
}
