package etcdmember

import (
	"context"
	"net"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// kv answers every range: enough of etcd for Quorum's read.
type kv struct{ pb.UnimplementedKVServer }

var _ pb.KVServer = (*kv)(nil)

func (*kv) Range(context.Context, *pb.RangeRequest) (*pb.RangeResponse, error) {
	return &pb.RangeResponse{Header: &pb.ResponseHeader{}}, nil
}

// TestReconnectAfterLateStart dials an endpoint nothing listens on, keeps
// failing against it for 16 s (as kiln does while etcd starts after a
// power cut), then starts a server there: the next read must succeed
// within a few seconds. With gRPC's default backoff the next attempt
// after 16 s of failures comes up to ~10 s later.
func TestReconnectAfterLateStart(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 20 s")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	c, err := Dial([]string{"http://" + addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for start := time.Now(); time.Since(start) < 16*time.Second; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := c.Quorum(ctx); err == nil {
			t.Fatalf("a read succeeded against %s with nothing listening", addr)
		}
		cancel()
		time.Sleep(500 * time.Millisecond)
	}

	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	s := grpc.NewServer()
	pb.RegisterKVServer(s, &kv{})
	go s.Serve(l)
	defer s.Stop()

	up := time.Now()
	const bound = 4 * time.Second
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Quorum(ctx)
		cancel()
		if err == nil {
			t.Logf("read succeeded %v after the server started", time.Since(up).Round(10*time.Millisecond))
			return
		}
		if time.Since(up) > bound {
			t.Fatalf("no read succeeded within %v of the server starting: %v", bound, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
