package state

import (
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/kiln-project/kiln/firstboot/machine"
)

// FuzzParseRecord: any ownership record from a disk parses or fails,
// never panics; a record kiln writes reads back as the machine it names.
func FuzzParseRecord(f *testing.F) {
	f.Add([]byte(`{"version":1,"productUUID":"4c4c4544-0031-3210-8052-b4c04f4e3232","macs":["52:54:00:00:00:01"]}`), "4c4c4544-0031-3210-8052-b4c04f4e3232", "52:54:00:00:00:01")
	f.Add([]byte(`{"version":1}`), "", "")
	f.Add([]byte(`[]`), "x", "y")
	f.Fuzz(func(t *testing.T, data []byte, uuid, mac string) {
		parseRecord(data)
		if !utf8.ValidString(uuid) || !utf8.ValidString(mac) {
			return // JSON carries text; sysfs gives ASCII
		}
		id := machine.ID{ProductUUID: uuid}
		if mac != "" {
			id.MACs = []string{mac}
		}
		got, err := parseRecord(recordOf(id))
		if err != nil || !reflect.DeepEqual(got, id) {
			t.Fatalf("the record of %+v reads back as %+v, %v", id, got, err)
		}
	})
}
