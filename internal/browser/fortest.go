package browser

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// startBound bounds the browser's start in ForTest: a cold start on a
// loaded two-core machine takes a few seconds.
const startBound = time.Minute

// ForTest opens a browser that closes when t ends. Without one it skips
// t, or fails it on CI (CI=true), where a skipped browser test would hide
// a missing host package.
func ForTest(t testing.TB) *Browser {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startBound)
	defer cancel()
	b, err := Open(ctx)
	switch {
	case errors.Is(err, ErrNoBrowser) && os.Getenv("CI") == "true":
		t.Fatalf("%v: run scripts/host-deps.sh, which installs Debian's chromium", err)
	case errors.Is(err, ErrNoBrowser):
		t.Skipf("%v: run scripts/host-deps.sh, which installs Debian's chromium, to run this test", err)
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}
