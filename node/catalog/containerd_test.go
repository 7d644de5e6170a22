package catalog

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The first ctr waits for containerd's socket to accept connections; a
// socket that never does ends the wait at its bound with an error that
// names it, and ctr is not run.
func TestAfterContainerdWaitsForTheSocket(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "containerd.sock")
	ctr := &fakeCtr{refs: map[string]string{}, held: map[string]bool{}}
	listening := make(chan time.Time, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		at := time.Now()
		l, err := net.Listen("unix", socket)
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(func() { l.Close() })
		listening <- at
	}()
	r := AfterContainerd(ctr, socket, 10*time.Second)
	if _, err := r.Run(context.Background(), "ctr", "-n", Namespace, "images", "ls"); err != nil {
		t.Fatal(err)
	}
	ran := time.Now()
	if at := <-listening; ran.Before(at) || ctr.lists != 1 {
		t.Errorf("ctr ran %d time(s), at %s, before containerd listened at %s", ctr.lists, ran, at)
	}

	never := AfterContainerd(ctr, filepath.Join(t.TempDir(), "none.sock"), 300*time.Millisecond)
	_, err := never.Run(context.Background(), "ctr", "-n", Namespace, "images", "ls")
	if err == nil || !strings.Contains(err.Error(), "none.sock") || ctr.lists != 1 {
		t.Errorf("no containerd: err %v after %d ctr runs; want an error naming the socket and no run", err, ctr.lists)
	}
}
