package validation

import (
	"strings"
	"testing"
)

type inner struct {
	Address string `json:"address"`
}

type doc struct {
	Name  string           `json:"name"`
	Nodes []inner          `json:"nodes"`
	Extra map[string]inner `json:"extra"`
}

func TestDecodeStrictReportsEveryUnknownFieldWithItsPath(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // field paths, in order
	}{
		{"clean", "name: a\nnodes: [{address: x}]\n", nil},
		{"top-level typo", "nmae: a\n", []string{"nmae"}},
		{"nested in list", "nodes: [{address: x}, {adress: y}]\n", []string{"nodes[1].adress"}},
		{"in map values", "extra: {k: {addr: 1}}\n", []string{"extra.k.addr"}},
		{"several at once", "zz: 1\nnodes: [{b: 1}]\naa: 2\n", []string{"aa", "nodes[0].b", "zz"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &List{File: "f.yaml"}
			var d doc
			if !DecodeStrict([]byte(tc.yaml), &d, l) {
				t.Fatalf("decode failed: %v", l)
			}
			var got []string
			for _, e := range l.Errors {
				got = append(got, e.Path)
				if e.File != "f.yaml" || e.Reason != "unknown field" {
					t.Errorf("error %+v: want file f.yaml and reason 'unknown field'", e)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("paths = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDecodeStrictRejectsBrokenYAML(t *testing.T) {
	l := &List{File: "f.yaml"}
	var d doc
	if DecodeStrict([]byte("name: [unclosed\n"), &d, l) {
		t.Fatal("decode of broken YAML succeeded")
	}
	if l.Err() == nil || !strings.Contains(l.Error(), "f.yaml: not valid YAML") {
		t.Fatalf("error = %v, want it to name the file and say the YAML is invalid", l.Err())
	}
}

func TestErrorNamesFileFieldAndReason(t *testing.T) {
	l := &List{File: "site.yaml"}
	l.Addf(Path("nodes").Index(3).Field("network").Field("address").String(), "%q is not an IP address", "10.0.1.300")
	want := `site.yaml: nodes[3].network.address: "10.0.1.300" is not an IP address`
	if got := l.Errors[0].Error(); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestDecodeStrictReportsDuplicateKeysWithBothLines(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // field path: reason
	}{
		{"none", "name: a\nnodes: [{address: x}]\n", nil},
		{"top level", "name: a\nnodes: []\nname: b\n", []string{`name: duplicate key "name" on lines 1 and 3`}},
		{"in a list item", "nodes:\n  - address: x\n    address: y\n", []string{`nodes[0].address: duplicate key "address" on lines 2 and 3`}},
		{"quoted the second time", "name: a\n\"name\": b\n", []string{`name: duplicate key "name" on lines 1 and 2`}},
		{"in map values, twice", "extra:\n  k: {address: 1}\n  k: {address: 2}\n  k: {address: 3}\n", []string{
			`extra.k: duplicate key "k" on lines 2 and 3`, `extra.k: duplicate key "k" on lines 2 and 4`}},
		{"same key in sibling mappings", "nodes: [{address: x}, {address: y}]\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &List{File: "f.yaml"}
			var d doc
			if !DecodeStrict([]byte(tc.yaml), &d, l) {
				t.Fatalf("decode failed: %v", l)
			}
			var got []string
			for _, e := range l.Errors {
				got = append(got, e.Path+": "+e.Reason)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("got %q, want %q...", got[i], tc.want[i])
				}
			}
		})
	}
}
