package ignition

import (
	"reflect"
	"testing"
)

// FuzzParse: any bytes given as a config parse to a config or an error,
// never a panic, and the same bytes always give the same answer.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"ignition":{"version":"3.4.0"}}`))
	f.Add([]byte(`{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"/etc/x","contents":{"source":"data:,x"}}]}}`))
	f.Add([]byte(`{"ignition":{"version":"3.5.0"},"passwd":{"users":[{"name":"ops","shouldExist":false}]}}`))
	f.Add([]byte(`{"ignition":{"version":"2.2.0"}}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		cfg1, warn1, err1 := Parse(raw)
		cfg2, warn2, err2 := Parse(raw)
		if (err1 == nil) != (err2 == nil) || !reflect.DeepEqual(cfg1, cfg2) || !reflect.DeepEqual(warn1, warn2) {
			t.Fatalf("two parses of the same bytes differ: %v / %v", err1, err2)
		}
	})
}

// FuzzVerifyHash: any pin is a valid hash spec or an error, never a
// panic, and a valid one verifies the data it was made from and nothing
// else.
func FuzzVerifyHash(f *testing.F) {
	f.Add("sha512-"+"00", []byte("x"))
	f.Add("sha256-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", []byte(""))
	f.Add("md5-abc", []byte("x"))
	f.Add("-", []byte{})
	f.Fuzz(func(t *testing.T, spec string, data []byte) {
		if CheckHashSpec(spec) != nil {
			if VerifyHash(data, spec, "data") == nil {
				t.Fatalf("an invalid spec %q verified", spec)
			}
			return
		}
		same, err := HashLike(data, spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := VerifyHash(data, same, "data"); err != nil {
			t.Fatalf("data does not verify against its own hash %s: %v", same, err)
		}
		if err := VerifyHash(append(data, 0), same, "data"); err == nil {
			t.Fatalf("other data verified against %s", same)
		}
	})
}
