package etcdsnapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrCorrupt is Verify's answer for a file that is not a whole etcd
// snapshot.
var ErrCorrupt = errors.New("etcdsnapshot: not a whole etcd snapshot")

// A snapshot taken through etcd's API is the member's bbolt database
// followed by the SHA-256 of that database (etcd's v3rpc maintenance
// server appends it; etcdutl snapshot restore checks it).
const hashLen = sha256.Size

// The bbolt file starts with a meta page: a 16-byte page header (id,
// flags, count, overflow), then the meta's magic, version and page size,
// in the machine's byte order (little-endian on every platform kiln
// runs on).
const (
	boltMetaFlag  = 0x04
	boltMagic     = 0xED0CDAED
	boltVersion   = 2
	boltHeaderLen = 28
)

// Verified is what Verify read of a snapshot.
type Verified struct {
	Size   int64
	SHA256 string // of the whole file, hex
}

// Verify checks the snapshot at path: a bbolt database header, a
// database a whole number of its pages long, and the SHA-256 at the end
// matching the database before it. A truncated or altered file fails
// with ErrCorrupt.
func Verify(path string) (Verified, error) {
	f, err := os.Open(path)
	if err != nil {
		return Verified{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Verified{}, err
	}
	size := fi.Size()
	if size < boltHeaderLen+hashLen {
		return Verified{}, fmt.Errorf("%s: %w: %d bytes, shorter than a database header and its hash", path, ErrCorrupt, size)
	}
	head := make([]byte, boltHeaderLen)
	if _, err := io.ReadFull(f, head); err != nil {
		return Verified{}, fmt.Errorf("%s: %w", path, err)
	}
	pageSize, err := boltHeader(head)
	if err != nil {
		return Verified{}, fmt.Errorf("%s: %w: %w", path, ErrCorrupt, err)
	}
	db := size - hashLen
	if db%int64(pageSize) != 0 {
		return Verified{}, fmt.Errorf("%s: %w: the database is %d bytes, not a whole number of %d-byte pages (truncated?)", path, ErrCorrupt, db, pageSize)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Verified{}, fmt.Errorf("%s: %w", path, err)
	}
	contents, whole := sha256.New(), sha256.New()
	if _, err := io.CopyN(io.MultiWriter(contents, whole), f, db); err != nil {
		return Verified{}, fmt.Errorf("%s: %w", path, err)
	}
	sum := make([]byte, hashLen)
	if _, err := io.ReadFull(f, sum); err != nil {
		return Verified{}, fmt.Errorf("%s: %w", path, err)
	}
	whole.Write(sum)
	if !bytes.Equal(contents.Sum(nil), sum) {
		return Verified{}, fmt.Errorf("%s: %w: the SHA-256 etcd appended does not match the database (truncated or altered)", path, ErrCorrupt)
	}
	return Verified{Size: size, SHA256: hex.EncodeToString(whole.Sum(nil))}, nil
}

// boltHeader checks the first meta page's header and returns its page
// size.
func boltHeader(b []byte) (uint32, error) {
	le := binary.LittleEndian
	if flags := le.Uint16(b[8:]); flags&boltMetaFlag == 0 {
		return 0, fmt.Errorf("no bbolt meta page at the start (page flags %#x)", flags)
	}
	if magic := le.Uint32(b[16:]); magic != boltMagic {
		return 0, fmt.Errorf("no bbolt database (magic %#x, want %#x)", magic, uint32(boltMagic))
	}
	if v := le.Uint32(b[20:]); v != boltVersion {
		return 0, fmt.Errorf("bbolt version %d, want %d", v, boltVersion)
	}
	ps := le.Uint32(b[24:])
	if ps < 512 || ps&(ps-1) != 0 {
		return 0, fmt.Errorf("bbolt page size %d is not a power of two of at least 512", ps)
	}
	return ps, nil
}
