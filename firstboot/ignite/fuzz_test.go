package ignite

import (
	"bytes"
	"encoding/base64"
	"net/url"
	"testing"
)

// FuzzDecodeDataURL: a data URL from a config decodes or fails, never
// panics; what is encoded as base64 or percent-escaped comes back as it
// was.
func FuzzDecodeDataURL(f *testing.F) {
	f.Add("data:,hello%20world", []byte("hello"))
	f.Add("data:text/plain;base64,aGk=", []byte{0, 1, 2})
	f.Add("data:;base64,aGk", []byte{})
	f.Add("data:%zz", []byte("%"))
	f.Fuzz(func(t *testing.T, raw string, data []byte) {
		decodeDataURL(raw)
		for _, enc := range []string{
			"data:;base64," + base64.StdEncoding.EncodeToString(data),
			"data:," + url.PathEscape(string(data)),
		} {
			got, err := decodeDataURL(enc)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%q decodes to %q, %v; want %q", enc, got, err, data)
			}
		}
	})
}
