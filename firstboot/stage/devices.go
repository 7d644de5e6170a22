package stage

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Fetcher opens an artifact's URL; size is its length, or -1 when the
// server does not say.
type Fetcher interface {
	Open(ctx context.Context, url string) (body io.ReadCloser, size int64, err error)
}

// HTTPFetcher fetches artifacts with a GET. The stage bounds each fetch
// with its context, so the client needs no timeout of its own.
type HTTPFetcher struct {
	// Client is nil for http.DefaultClient.
	Client *http.Client
}

// Open GETs url and refuses any answer but 200 OK, naming the URL.
func (f HTTPFetcher) Open(ctx context.Context, url string) (io.ReadCloser, int64, error) {
	client := f.Client
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err // a *url.Error, which names the URL
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp.Body, resp.ContentLength, nil
}

// Partition is a root slot's partition, opened for writing.
type Partition interface {
	io.WriterAt
	io.ReaderAt
	// Size is the partition's length in bytes.
	Size() int64
	// Sync makes what was written durable, and what is read next come
	// from the device.
	Sync() error
	Close() error
}

// Partitions opens a partition by its GPT label.
type Partitions interface {
	OpenPartition(label string) (Partition, error)
}

// DevPartitions opens /dev/disk/by-partlabel/<label> under Root.
type DevPartitions struct{ Root string }

// OpenPartition opens the partition read-write and exclusively: Linux
// refuses O_EXCL on a block device that is mounted or otherwise held.
func (d DevPartitions) OpenPartition(label string) (Partition, error) {
	path := filepath.Join(d.Root, "/dev/disk/by-partlabel", label)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_EXCL, 0)
	if err != nil {
		return nil, err
	}
	size, err := f.Seek(0, io.SeekEnd) // a block device's Stat has no size
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("the size of %s: %w", path, err)
	}
	return &devPartition{File: f, size: size}, nil
}

type devPartition struct {
	*os.File
	size int64
}

func (p *devPartition) Size() int64 { return p.size }

// Sync flushes the partition and drops its pages from the cache, so a
// read-back reads the device rather than what was just written to
// memory.
func (p *devPartition) Sync() error {
	if err := p.File.Sync(); err != nil {
		return err
	}
	if err := unix.Fadvise(int(p.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("dropping %s from the page cache: %w", p.Name(), err)
	}
	return nil
}
